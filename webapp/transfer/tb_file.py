"""Read a TensorBoard logdir with the `tensorboard` package's own reader (no TensorFlow needed), for
`manage.py import_tensorboard`.

A run is what TensorBoard calls one: a directory holding at least one event file (`*tfevents*`) directly
(io_wrapper.GetLogdirSubdirectories); its files are read in name order (their names start with the writer's
start time), every record through RawEventFileLoader, then the same read-time compat layers TensorBoard's
EventFileLoader applies (data_compat, dataclass_compat): legacy `simple_value` scalars (tf.summary v1, torch,
tensorboardX) and tensor scalars (tf.summary v2, tensorboard.summary.Writer) come out alike. A tag is a scalar
series when its first value says so (data class SCALAR, or the scalars plugin); histograms, images, text and the
rest are counted in `skipped`. A step logged twice for one tag (a restarted writer) keeps the later value.

Damage: a record cut off at the end of a file (a writer still running, or killed mid-write) is skipped and
noted, as TensorBoard does; any other unreadable record (checksum mismatch, not an Event) raises TBReadError
naming the file and byte offset.
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

PROGRESS_EVERY = 1_000_000  # scalar values between two progress calls


class TBReadError(ValueError):
    """A logdir or event file that cannot be read (missing, empty of runs, corrupt)."""


@dataclass
class TagData:
    """One scalar tag of one run, in file order (duplicates resolved by `finish`)."""

    steps: array = field(default_factory=lambda: array("q"))
    values: array = field(default_factory=lambda: array("d"))
    wall_times: array = field(default_factory=lambda: array("d"))

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps ascending, values, wall times) with one point per step: the last one written wins."""
        steps = np.frombuffer(self.steps, dtype=np.int64)[::-1]
        _, first = np.unique(steps, return_index=True)  # first in reversed order = last written
        idx = len(steps) - 1 - first
        return (np.frombuffer(self.steps, dtype=np.int64)[idx], np.frombuffer(self.values, dtype=np.float64)[idx],
                np.frombuffer(self.wall_times, dtype=np.float64)[idx])


@dataclass
class TBRun:
    path: str  # absolute directory
    rel: str  # relative to the logdir ("." for the logdir itself)
    files: list[str]
    tags: dict[str, TagData] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    values: int = 0

    @property
    def bytes(self) -> int:
        return sum(os.path.getsize(f) for f in self.files)


def find_runs(logdir: str) -> list[TBRun]:
    """Every run under `logdir`, sorted by relative path. TBReadError if the logdir is missing or has none."""
    from tensorboard.backend.event_processing import io_wrapper

    if not os.path.exists(logdir):
        raise TBReadError(f"{logdir}: no such directory")
    if not os.path.isdir(logdir):
        raise TBReadError(f"{logdir}: not a directory (give the logdir, the folder TensorBoard's --logdir names)")
    root = os.path.realpath(logdir)
    runs = []
    for d in io_wrapper.GetLogdirSubdirectories(root):
        files = sorted(os.path.join(d, f) for f in os.listdir(d)
                       if io_wrapper.IsSummaryEventsFile(os.path.join(d, f)) and os.path.isfile(os.path.join(d, f)))
        if files:
            runs.append(TBRun(path=d, rel=os.path.relpath(d, root), files=files))
    if not runs:
        raise TBReadError(f"{logdir}: no TensorBoard event files (*tfevents*) in it or below it")
    return sorted(runs, key=lambda r: r.rel)


def _record_end(path: str, offset: int, size: int) -> str | None:
    """Why the reader stopped before the end of the file: None if the rest is one record cut off by the end of the
    file (tolerated), else a description of the damage. TFRecord framing: u64 length, u32 crc, data, u32 crc."""
    left = size - offset
    if left < 12:
        return None
    with open(path, "rb") as f:
        f.seek(offset)
        length = int.from_bytes(f.read(8), "little")
    if offset + 12 + length + 4 > size:
        return None
    return f"unreadable record at byte {offset} of {size} (checksum mismatch or not an event)"


def read_run(run: TBRun, progress: Callable[[int], None] | None = None) -> TBRun:
    """Fill run.tags with every scalar value of the run's files. Raises TBReadError on a damaged file."""
    from google.protobuf.message import DecodeError
    from tensorboard import data_compat, dataclass_compat
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat import tf
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.plugins.scalar import metadata as scalar_metadata
    from tensorboard.util import tensor_util

    scalar_tag: dict[str, bool] = {}  # tag -> is a scalar series (decided by its first value, as TensorBoard does)
    other: dict[str, str] = {}  # non-scalar tag -> its plugin / kind
    odd: dict[str, int] = {}  # scalar tag -> values that were not one number
    initial_metadata: dict = {}  # dataclass_compat's per-run memory of each tag's first metadata
    next_progress = PROGRESS_EVERY
    for path in run.files:
        size = os.path.getsize(path)
        consumed = 0
        try:
            for record in RawEventFileLoader(path).Load():
                consumed += len(record) + 16
                try:
                    event = event_pb2.Event.FromString(record)
                except DecodeError:
                    raise TBReadError(f"{path}: record at byte {consumed - len(record) - 16} is not an Event "
                                      "(corrupt file)") from None
                if not event.HasField("summary"):
                    continue
                for ev in dataclass_compat.migrate_event(data_compat.migrate_event(event), initial_metadata):
                    for value in ev.summary.value:
                        tag = value.tag
                        is_scalar = scalar_tag.get(tag)
                        if is_scalar is None:
                            md = value.metadata
                            is_scalar = scalar_tag[tag] = (
                                md.data_class == summary_pb2.DATA_CLASS_SCALAR
                                or (md.data_class == summary_pb2.DATA_CLASS_UNKNOWN
                                    and md.plugin_data.plugin_name == scalar_metadata.PLUGIN_NAME))
                            if not is_scalar:
                                other[tag] = md.plugin_data.plugin_name or value.WhichOneof("value") or "unknown"
                        if not is_scalar:
                            continue
                        x = _number(value, tensor_util)
                        if x is None:
                            odd[tag] = odd.get(tag, 0) + 1
                            continue
                        data = run.tags.get(tag)
                        if data is None:
                            data = run.tags[tag] = TagData()
                        data.steps.append(ev.step)
                        data.values.append(x)
                        data.wall_times.append(ev.wall_time)
                        run.values += 1
                        if progress and run.values >= next_progress:
                            progress(run.values)
                            next_progress += PROGRESS_EVERY
        except (OSError, tf.errors.OpError) as e:
            raise TBReadError(f"{path}: {e}") from None
        if consumed < size:
            damage = _record_end(path, consumed, size)
            if damage:
                raise TBReadError(f"{path}: {damage} (corrupt file)")
            run.skipped.append(f"{os.path.basename(path)}: last record cut off at byte {consumed} of {size} "
                               "(written while the file was being read, or the writer was killed)")
    for tag, kind in sorted(other.items()):
        run.skipped.append(f"tag {tag!r}: {kind} data, not a scalar")
    for tag, n in sorted(odd.items()):
        run.skipped.append(f"tag {tag!r}: {n} values that are not a single number")
    return run


def _number(value, tensor_util) -> float | None:
    """A scalar summary value -> its number as a Python float (a float32 exactly as stored), else None."""
    t = value.tensor
    if not t.tensor_content and len(t.float_val) == 1 and not t.tensor_shape.dim:  # the common case, fast
        return t.float_val[0]
    try:
        arr = tensor_util.make_ndarray(t)
    except (TypeError, ValueError):
        return None
    if arr.size != 1 or arr.dtype.kind not in "fiub":
        return None
    return float(arr.reshape(()).item())
