"""Offline scan of a metrics CSV with the live detectors: one JSON line per anomaly.

The file has a `step` column and metric columns named by the contract (`train/loss`, ...) or renamed with
`COLUMN=METRIC` mappings; other columns are ignored. A `run` column splits the file into independent runs; a
`timestamp`/`_timestamp`/`time`/`wall_time` column (seconds) enables stall detection. An empty cell is a missing
value (sparse logging); `nan`, `inf`, `-inf` are non-finite values. A step lower than the previous one of its run
is a rewind (a resume from a checkpoint): anomalies found on the superseded points are dropped. A file whose name
ends in `.gz` is read as gzip.
"""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from observatory import contract
from observatory.anomalies.model import Anomaly, AnomalyLog
from observatory.anomalies.monitor import Monitor
from observatory.anomalies.routing import Config, watched

STEP, RUN, TIME = "step", "run", "time"
TIME_COLUMNS = ("timestamp", "_timestamp", "time", "wall_time")
Row = tuple[str | None, int, dict, float | None]  # (run, step, values, t)


class ScanError(ValueError):
    """A file the scanner cannot use; the message is one line for stderr."""


@dataclass
class Layout:
    """Which CSV column is what."""

    step: int
    run: int | None = None
    time: int | None = None
    metrics: dict[int, str] = field(default_factory=dict)  # column index -> metric name


def parse_maps(items: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in items:
        col, sep, metric = item.rpartition("=")
        if not sep or not col or not metric:
            raise ScanError(f"--map {item!r}: expected COLUMN=METRIC")
        if metric not in (STEP, RUN, TIME) and not contract.METRIC_NAME_RE.match(metric):
            raise ScanError(f"--map {item!r}: {metric!r} is not a valid metric name")
        out[col] = metric
    return out


def layout(header: list[str], mapping: Mapping[str, str], config: Config) -> Layout:
    names = [mapping.get(h.strip(), h.strip()) for h in header]
    if STEP not in names:
        raise ScanError(f"no {STEP!r} column (columns: {', '.join(h.strip() for h in header) or 'none'})")
    lay = Layout(step=names.index(STEP))
    lay.run = names.index(RUN) if RUN in names else None
    for i, name in enumerate(names):
        if name == TIME or (lay.time is None and name in TIME_COLUMNS and header[i].strip() not in mapping):
            lay.time = i
        elif i not in (lay.step, lay.run) and (header[i].strip() in mapping or contract.describe(name) is not None
                                               or watched(name, config)):
            lay.metrics[i] = name
    return lay


def _number(cell: str, where: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise ScanError(f"{where}: {cell[:40]!r} is not a number") from None


def read_rows(lines: Iterable[str], mapping: Mapping[str, str] | None = None,
              config: Config | None = None) -> Iterator[Row]:
    """Rows of a CSV (any iterable of lines) as (run, step, values, t); raises ScanError on a bad file."""
    reader = csv.reader(lines)
    try:
        header = next(reader, None)
        if header is None:
            raise ScanError("the file is empty")
        lay = layout(header, mapping or {}, config or Config())
        for row in reader:
            if not row:
                continue
            where = f"line {reader.line_num}"
            cell = row[lay.step].strip() if lay.step < len(row) else ""
            if not cell:
                raise ScanError(f"{where}: empty step")
            step = _number(cell, f"{where}, column {STEP}")
            if step != step or step < 0 or step != int(step):
                raise ScanError(f"{where}: step {cell[:40]!r} is not a whole number >= 0")
            run = row[lay.run].strip() if lay.run is not None and lay.run < len(row) else None
            t = None
            if lay.time is not None and lay.time < len(row) and row[lay.time].strip():
                t = _number(row[lay.time].strip(), f"{where}, time column")
            values = {}
            for i, name in lay.metrics.items():
                if i < len(row) and row[i].strip():
                    values[name] = _number(row[i].strip(), f"{where}, column {header[i].strip()!r}")
            yield run, int(step), values, t
    except csv.Error as e:
        raise ScanError(f"not a readable CSV: {e}") from None


def scan_rows(rows: Iterable[Row], config: Config | None = None,
              trace: list | None = None) -> list[tuple[str | None, Anomaly]]:
    """Feed rows to one Monitor per run, exactly as the live path feeds messages; the final anomaly records.

    `trace`, if given, receives (run, step, t, event) for every event, in order (the benchmark measures delays).
    """
    monitors: dict[str | None, tuple[Monitor, AnomalyLog, list]] = {}
    for run, step, values, t in rows:
        if run not in monitors:
            monitors[run] = (Monitor(config), AnomalyLog(), [-1])
        mon, log, last = monitors[run]
        events = mon.rewind(step - 1) if step < last[0] else []
        last[0] = step
        if t is not None:
            events += mon.tick(t)  # before the step: a long gap since the previous row is a stall
        events += mon.observe(step, values, t)
        log.apply(events)
        if trace is not None:
            trace += [(run, step, t, e) for e in events]
    return [(run, a) for run, (_, log, _) in monitors.items() for a in log.anomalies()]


def open_text(path: str):
    """A CSV file for reading as text; gzip-compressed when its name ends in `.gz`."""
    if str(path).endswith(".gz"):
        return gzip.open(path, "rt", newline="", encoding="utf-8")
    return open(path, newline="", encoding="utf-8")


def scan_file(path: str, mapping: Mapping[str, str] | None = None,
              config: Config | None = None) -> list[tuple[str | None, Anomaly]]:
    try:
        with open_text(path) as f:
            return scan_rows(read_rows(f, mapping, config), config)
    except (OSError, EOFError, UnicodeDecodeError) as e:  # gzip: BadGzipFile is an OSError, truncation EOFError
        raise ScanError(f"cannot read {path}: {e}") from None


def as_record(run: str | None, a: Anomaly) -> dict:
    return {"run": run, **a.to_dict()}
