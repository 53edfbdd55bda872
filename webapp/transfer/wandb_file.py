"""Read a W&B offline run directory (`offline-run-*/run-*.wandb`) without W&B's private reader or a network.

For `manage.py import_wandb`. Needs the `wandb` package, for its protobuf definitions only (imported on use).
The .wandb file is a LevelDB-style log (32 KiB blocks of CRC-checked, possibly fragmented records) of
`wandb_internal_pb2.Record` protobufs. A crashed or copied-mid-write run is read up to the damage, the reader
resynchronises at the next block, and every skipped part is listed in `skipped`. A run W&B finished writing ends
with an `exit` record: `exit_code` is its code, None when there is none (still running, crashed, cut off).
"""

from __future__ import annotations

import glob
import json
import math
import os
import struct
import zlib
from typing import Any, Iterator

HEADER = struct.Struct("<4sHB")  # ident ":W&B", magic 0xBEE1, version
RECORD = struct.Struct("<IHB")  # crc32(type byte + data), data length, type
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (FULL, FIRST, MIDDLE, LAST)}


class WandbReadError(ValueError):
    """The path holds no readable W&B run at all (missing file, wrong format)."""


def find_run_file(path: str) -> str:
    """Accept a .wandb file, an offline-run-* directory, or a wandb/ directory holding exactly one run."""
    if os.path.isfile(path):
        return path
    files = sorted(glob.glob(os.path.join(path, "run-*.wandb")))
    if not files:
        files = sorted(glob.glob(os.path.join(path, "*run-*", "run-*.wandb")))
    if not files:
        files = sorted(glob.glob(os.path.join(path, "wandb", "*run-*", "run-*.wandb")))
    if len(files) != 1:
        raise WandbReadError(f"{path}: expected one run-*.wandb file, found {len(files)}"
                             + (f" ({', '.join(files[:5])})" if files else ""))
    return files[0]


def iter_records(data: bytes, skipped: list[str]) -> Iterator[bytes]:
    """Yield each complete record payload; note torn, corrupt or truncated parts in `skipped`."""
    if len(data) < HEADER.size:
        raise WandbReadError(f"file is {len(data)} bytes, shorter than the {HEADER.size}-byte header")
    ident, magic, version = HEADER.unpack_from(data, 0)
    if ident != b":W&B" or magic != 0xBEE1:
        raise WandbReadError("not a W&B transaction log (bad header)")
    pos, pending = HEADER.size, None  # pending: fragments of a record spanning blocks
    while pos < len(data):
        left = BLOCK - pos % BLOCK
        if left < RECORD.size:  # block trailer (zero padding)
            pos += left
            continue
        if pos + RECORD.size > len(data):
            skipped.append(f"truncated record header at byte {pos} ({len(data) - pos} bytes)")
            break
        crc, n, rtype = RECORD.unpack_from(data, pos)
        if crc == 0 and n == 0 and rtype == 0:  # zero-filled (preallocated) rest of block
            pos += left
            continue
        body = data[pos + RECORD.size: pos + RECORD.size + n]
        if rtype not in _TYPE_CRC or n > left - RECORD.size:
            skipped.append(f"corrupt record header at byte {pos}; resumed at the next block")
            pos, pending = pos + left, None
            continue
        if len(body) < n:
            skipped.append(f"truncated record at byte {pos} ({len(body)} of {n} bytes)")
            break
        if zlib.crc32(body, _TYPE_CRC[rtype]) != crc:
            skipped.append(f"checksum mismatch at byte {pos}; resumed at the next block")
            pos, pending = pos + left, None
            continue
        pos += RECORD.size + n
        if rtype == FULL:
            if pending is not None:
                skipped.append(f"unfinished fragmented record before byte {pos - n - RECORD.size}")
            pending = None
            yield body
        elif rtype == FIRST:
            pending = [body]
        elif pending is None:
            skipped.append(f"orphan record fragment at byte {pos - n - RECORD.size}")
        elif rtype == MIDDLE:
            pending.append(body)
        else:
            yield b"".join(pending + [body])
            pending = None
    if pending is not None:
        skipped.append("last record incomplete (run ended mid-write)")


def _value(value_json: str) -> Any:
    return json.loads(value_json)  # NaN / Infinity tokens are accepted by json.loads


def _key(item) -> str:
    return item.key or ".".join(item.nested_key)  # a nested dict {"a": {"b": 1}} reads as "a.b", as in W&B


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_run(run_dir: str) -> dict:
    """{"run_id", "name", "project", "config", "summary", "history": [{"_step": int, name: number}], "skipped",
    "exit_code", "path"}.

    History keeps numeric values only (W&B's own `_timestamp`/`_runtime` included); media and other values are
    counted in `skipped`. Rows appear in file order; a run resumed with repeated steps keeps both rows.
    """
    from wandb.proto import wandb_internal_pb2 as pb  # only the message definitions

    path = find_run_file(run_dir)
    with open(path, "rb") as f:
        data = f.read()
    skipped: list[str] = []
    base = os.path.basename(path)
    out: dict[str, Any] = {"run_id": base[4:-6] if base.startswith("run-") else None, "name": None,
                           "project": None, "config": {}, "summary": {}, "history": [], "skipped": skipped,
                           "exit_code": None, "path": path}
    non_numeric: dict[str, int] = {}
    bad = 0
    for payload in iter_records(data, skipped):
        rec = pb.Record()
        try:
            rec.ParseFromString(payload)
        except Exception:
            bad += 1
            continue
        kind = rec.WhichOneof("record_type")
        try:
            if kind == "run":
                out["run_id"] = rec.run.run_id or out["run_id"]
                out["name"] = rec.run.display_name or None
                out["project"] = rec.run.project or None
                _apply_config(out["config"], rec.run.config)
            elif kind == "config":
                _apply_config(out["config"], rec.config)
            elif kind == "summary":
                for item in rec.summary.update:
                    out["summary"][_key(item)] = _value(item.value_json)
            elif kind == "history":
                row: dict[str, Any] = {}
                for item in rec.history.item:
                    v = _value(item.value_json)
                    if _is_number(v):
                        row[_key(item)] = float(v)
                    else:
                        non_numeric[_key(item)] = non_numeric.get(_key(item), 0) + 1
                step = row.get("_step", rec.history.step.num)
                row["_step"] = int(step) if _is_number(step) and math.isfinite(step) else rec.history.step.num
                out["history"].append(row)
            elif kind == "exit":
                out["exit_code"] = rec.exit.exit_code
        except (ValueError, TypeError) as e:
            bad += 1
            skipped.append(f"unreadable {kind} record: {e}")
    if bad:
        skipped.append(f"{bad} records could not be decoded")
    for key, n in sorted(non_numeric.items()):
        skipped.append(f"{n} non-numeric values of {key!r}")
    out["name"] = out["name"] or out["run_id"]
    return out


def _apply_config(config: dict, cfg_record) -> None:
    for item in cfg_record.update:
        key = _key(item)
        if key == "_wandb":  # W&B's own bookkeeping
            continue
        config[key] = _value(item.value_json)
    for item in cfg_record.remove:
        config.pop(_key(item), None)
