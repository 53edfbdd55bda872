"""Command line: fit a scaling law to a CSV of rungs, print parameters, bands and predictions, or a forecast.

    python -m observatory.scaling fit FILE.csv --law chinchilla|compute|overtrained|auto \
        --columns N=COL,D=COL,L=COL [--columns C=COL] [--predict N,D | N,D,C | C=FLOPS ...]... [--json] \
        [--seed S] [--bootstrap K] [--level 0.95] [--holdout K] [--starts S]
    python -m observatory.scaling forecast FILE.csv --hero N,D[,C] [--points 128] [--json] [the fit options]

Columns default to headers named N, D, C and L (or loss). N is ACTIVE parameters. The compute law uses the C
column when there is one, else 6·N·D; --predict N,D for it means C = 6·N·D, so when the C column counts FLOPs
another way (attention, embeddings), give N,D,C counted the same way. A bad file (unreadable, missing
column, a value that is not a positive number, fewer rows than the law has parameters) prints one line
`error: ...` on stderr and exits 2. --predict and --columns accumulate when repeated (a role mapped to two
columns is an error); any other option given twice is an ambiguous call: argparse's usage error, exit 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys

import numpy as np

from observatory.scaling.fit import DEFAULT_STARTS, Fit, fit
from observatory.scaling.forecast import make_forecast
from observatory.scaling.laws import LAWS, Points

ROLES = ("N", "D", "C", "L")
DEFAULT_HEADERS = {"N": ("N",), "D": ("D",), "C": ("C",), "L": ("L", "loss")}


class UsageError(Exception):
    """A bad file or argument: one line for stderr, exit 2."""


def parse_columns(specs: list[str]) -> dict[str, str]:
    """Every --columns spec merged; a role mapped to two different columns is ambiguous (UsageError)."""
    out = {}
    for spec in specs:
        for part in filter(None, spec.split(",")):
            role, eq, col = part.partition("=")
            role, col = role.strip().upper(), col.strip()
            if not eq or role not in ROLES or not col:
                raise UsageError(f"--columns {part!r}: expected ROLE=COLUMN with ROLE one of {', '.join(ROLES)}")
            if out.get(role, col) != col:
                raise UsageError(f"--columns maps {role} twice ({out[role]!r} and {col!r}): give it once")
            out[role] = col
    return out


class _Once(argparse.Action):
    """A single-valued option: giving it twice is an ambiguous call (exit 2), not a silent last-one-wins."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = namespace.__dict__.setdefault("_given", set())
        if self.dest in seen:
            parser.error(f"{option_string} given more than once ({getattr(namespace, self.dest)!r}, then "
                         f"{values!r}): it takes one value")
        seen.add(self.dest)
        setattr(namespace, self.dest, values)


def _number(text: str | None, where: str, what: str) -> float:
    if text is None or not text.strip():
        raise UsageError(f"{where}: {what} is empty")
    try:
        x = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {what} is not a number: {text!r}") from None
    if not math.isfinite(x) or x <= 0:
        raise UsageError(f"{where}: {what} must be a positive number, got {text!r}")
    return x


def read_rungs(path: str, columns: dict[str, str]) -> dict[str, np.ndarray]:
    """The CSV's rows as {role: values}; roles not asked for and without a default header are absent."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames
            if not header:
                raise UsageError(f"{path}: empty file (no header row)")
            chosen = {}
            for role in ROLES:
                if role in columns:
                    if columns[role] not in header:
                        raise UsageError(f"{path}: no column {columns[role]!r} for {role} "
                                         f"(columns: {', '.join(header)})")
                    chosen[role] = columns[role]
                else:
                    chosen.update({role: h for h in DEFAULT_HEADERS[role] if h in header and role not in chosen})
            values = {role: [] for role in chosen}
            for row in reader:
                if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
                    continue                                  # blank line
                for role, col in chosen.items():
                    values[role].append(_number(row.get(col), f"{path} line {reader.line_num}", f"column {col!r}"))
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"{path}: not a readable CSV ({e})") from None
    if "L" not in values:
        raise UsageError(f"{path}: no loss column (give --columns L=COLUMN; columns: {', '.join(header)})")
    if not values["L"]:
        raise UsageError(f"{path}: no data rows")
    return {role: np.array(v) for role, v in values.items()}


def _queries(specs: list[str], what: str = "--predict") -> list[Points]:
    """N,D (C = 6·N·D), N,D,C (C as counted for the rungs' C column), or C=FLOPS (compute law only)."""
    out = []
    for spec in specs:
        where = f"{what} {spec!r}"
        if spec.upper().startswith("C="):
            out.append(Points.of(C=[_number(spec[2:], where, "C")]))
            continue
        parts = spec.split(",")
        if len(parts) not in (2, 3):
            raise UsageError(f"{where}: expected N,D or N,D,C (active parameters, tokens, FLOPs) or C=FLOPS")
        vals = [_number(p, where, name) for p, name in zip(parts, "NDC")]
        out.append(Points.of(N=[vals[0]], D=[vals[1]], C=vals[2:] or None))
    return out


def _fit(args) -> Fit:
    cols = read_rungs(args.file, parse_columns(args.columns))
    if ("N" in cols) != ("D" in cols):
        raise UsageError(f"{args.file}: N and D come together (found only {'N' if 'N' in cols else 'D'})")
    points = Points.of(N=cols.get("N"), D=cols.get("D"), C=cols.get("C"))
    if args.law != "auto" and not points.has(LAWS[args.law].needs):
        need = ",".join(f"{r}=COLUMN" for r in LAWS[args.law].needs)
        raise UsageError(f"{args.file}: law {args.law} needs columns {' and '.join(LAWS[args.law].needs)} "
                         f"(--columns {need})")
    try:
        return fit(points, cols["L"], args.law, bootstrap=args.bootstrap, seed=args.seed, level=args.level,
                   holdout=args.holdout, starts=args.starts)
    except ValueError as e:
        raise UsageError(f"{args.file}: {e}") from None


def _predictions(result: Fit, queries: list[Points]) -> list[dict]:
    rows = []
    for q in queries:
        if not q.has(result.law.needs):
            raise UsageError(f"--predict C=...: law {result.law.name} needs N,D")
        rows += result.predictions(q)
    return rows


def _g(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def _human(s: dict) -> str:
    lines = [f"law {s['law']}: {s['formula']}   ({s['rows']} rows, {s['bootstrap']} bootstrap fits, "
             f"{s['level']:.0%} bands, seed {s['seed']})"]
    err = s["holdout_error"]
    lines.append(f"held-out error on the {s['holdout_rows']} largest-compute row(s): "
                 + ("too few rows" if err is None else f"{err:.3%}"))
    if s.get("candidates"):
        lines.append("auto: " + "  ".join(f"{k} {'n/a' if v is None else f'{v:.3%}'}"
                                          for k, v in s["candidates"].items()))
    lines.append(f"{'param':<8}{'value':>14}{'low':>14}{'high':>14}")
    for k, v in s["params"].items():
        lo, hi = (s["bands"] or {}).get(k, (None, None))
        lines.append(f"{k:<8}{_g(v):>14}{_g(lo):>14}{_g(hi):>14}")
    if s["predictions"]:
        lines.append(f"{'N':>12}{'D':>12}{'C':>12}{'loss':>10}{'low':>10}{'high':>10}")
        for p in s["predictions"]:
            lines.append(f"{_g(p['N']):>12}{_g(p['D']):>12}{_g(p['C']):>12}{p['loss']:>10.4f}"
                         + "".join(f"{'-' if p[k] is None else format(p[k], '.4f'):>10}" for k in ("low", "high")))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m observatory.scaling",
                                description="Fit scaling laws to ladder rungs (N = active parameters).")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (("fit", "fit a law, print parameters, bands, predictions"),
                        ("forecast", "freeze a fit as the hero run's forecast (content-hashed record)")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("file", help="CSV with a header row, one row per rung")
        s.add_argument("--law", choices=[*LAWS, "auto"], default="auto", action=_Once)
        s.add_argument("--columns", action="append", default=[], metavar="ROLE=COL,...",
                       help="map N, D, C, L to CSV columns (default: headers N, D, C, L or loss); repeatable")
        s.add_argument("--json", action="store_true", help="print JSON instead of a table")
        s.add_argument("--seed", type=int, default=0, action=_Once)
        s.add_argument("--bootstrap", type=int, default=200, action=_Once,
                       help="rung resamples for the bands (0: none)")
        s.add_argument("--level", type=float, default=0.95, action=_Once, help="band coverage (default 0.95)")
        s.add_argument("--holdout", type=int, default=None, action=_Once,
                       help="largest-compute rows held out for the held-out error (default max(1, rows // 4))")
        s.add_argument("--starts", type=int, default=DEFAULT_STARTS, action=_Once,
                       help="grid starts refined per fit")
        if name == "fit":
            s.add_argument("--predict", nargs="+", action="extend", default=[], metavar="N,D",
                           help="N,D (C = 6ND), N,D,C, or C=FLOPS (compute law only); repeatable")
        else:
            s.add_argument("--hero", required=True, metavar="N,D[,C]", action=_Once,
                           help="the hero run: active params, tokens[, FLOPs as the rungs' C column counts them]")
            s.add_argument("--points", type=int, default=128, action=_Once,
                           help="points on the loss-over-tokens curve")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    vars(args).pop("_given", None)
    try:
        if not 0 < args.level < 1 or args.bootstrap < 0 or (args.starts is not None and args.starts < 1):
            raise UsageError("--level must be in (0, 1), --bootstrap ≥ 0, --starts ≥ 1")
        if args.command == "fit":
            queries = _queries(args.predict)
            result = _fit(args)
            summary = {**result.summary(), "predictions": _predictions(result, queries)}
            print(json.dumps(summary, indent=2) if args.json else _human(summary))
        else:
            (hero,) = _queries([args.hero], "--hero")
            if hero.N is None:
                raise UsageError(f"--hero {args.hero!r}: expected N,D or N,D,C")
            if args.points < 2:
                raise UsageError("--points must be ≥ 2")
            fc = make_forecast(_fit(args), float(hero.N[0]), float(hero.D[0]), C=float(hero.C[0]),
                               points=args.points)
            h = fc.hero
            print(json.dumps(fc.to_dict(), indent=2) if args.json else
                  f"law {fc.law}: hero N={h['N']:.4g} D={h['D']:.4g} -> loss {h['loss']:.4f} "
                  f"[{_g(h['low'])}, {_g(h['high'])}]  holdout error {_g(fc.holdout_error)}\nsha256 {fc.sha256}")
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
