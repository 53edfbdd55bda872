"""What the public may see of a run: no host paths, host names, pids or tracebacks. Operators get the full record.

A trainer's config, manifest, heartbeats, events and failure text carry host details (checkpoint directories,
corpus paths, its pid, stack traces). Public answers replace every absolute path by its last component, drop
every HOST_KEYS entry and cut a failure to its one-line reason.
"""

from __future__ import annotations

import re

# An absolute POSIX path, a home-relative path or a Windows drive path, inside any text.
_ABS_PATH = re.compile(r"(?<![\w.:/-])(?:~/|/(?=[\w.@+-])|[A-Za-z]:\\)[^\s'\"(),;\[\]{}<>]*")
MAX_REASON = 300
HOST_KEYS = frozenset({"pid", "ppid", "host", "hostname", "node"})  # keys whose values identify the machine


def _short(match: re.Match) -> str:
    path = match.group(0).rstrip("/\\")
    tail = re.split(r"[/\\]", path)[-1]
    return f"…/{tail}" if tail else "…"


def redact_text(text: str) -> str:
    return _ABS_PATH.sub(_short, text)


def redact(obj):
    """A copy of a JSON-like value with host paths removed from every string (keys included) and no HOST_KEYS."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {redact_text(k) if isinstance(k, str) else k: redact(v) for k, v in obj.items()
                if not (isinstance(k, str) and k.lower() in HOST_KEYS)}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def one_line_reason(detail: str) -> str:
    """The first line of a failure (e.g. "TrainingFailed: loss non-finite for 5 steps"), without paths."""
    first = next((line.strip() for line in (detail or "").splitlines() if line.strip()), "")
    first = redact_text(first)
    return first if len(first) <= MAX_REASON else first[: MAX_REASON - 1] + "…"
