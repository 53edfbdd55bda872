"""Training text, read offline: the built-in domains every Debian + CPython machine has, and user corpora.

Built-in domains come from the standard library (source and docstrings), its help topics and licence texts;
user corpora are directories of .txt / .jsonl / .parquet files, one directory per domain. Text is tokenized as
UTF-8 bytes, documents are joined by a NUL separator, and the tail of each domain is held out for evaluation.
"""

from __future__ import annotations

import ast
import functools
import glob
import gzip
import hashlib
import json
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from training.config import DataSection
from training.errors import ConfigError

SEPARATOR_ID = 0  # NUL never occurs in text (stripped on load), so it marks document boundaries
TOKENIZER = {"name": "byte-utf8", "vocab_size": 256, "separator_id": SEPARATOR_ID}  # UTF-8 bytes as tokens


# ---------------------------------------------------------------------------------------------- sources
@dataclass
class Domain:
    name: str
    tokens: np.ndarray  # uint8, documents joined by SEPARATOR_ID, train part
    eval_tokens: np.ndarray  # uint8, held-out tail
    documents: int
    sources: list[dict]  # {"kind", "pattern", "files", "bytes"} per source actually read
    builtin: bool
    skipped: list[str] = field(default_factory=list)

    def describe(self) -> dict:
        both = np.concatenate([self.tokens, self.eval_tokens])
        return {"name": self.name, "builtin": self.builtin, "sources": self.sources, "documents": self.documents,
                "bytes": int(sum(s["bytes"] for s in self.sources)), "tokens": int(both.size),
                "train_tokens": int(self.tokens.size), "eval_tokens": int(self.eval_tokens.size),
                "sha256": hashlib.sha256(both.tobytes()).hexdigest()[:16], "skipped": self.skipped}


def _hashed(paths: list[str], root: str) -> list[str]:
    # A fixed pseudo-random order, the same on every machine, so a byte cap samples the whole tree.
    return sorted(paths, key=lambda p: hashlib.sha1(os.path.relpath(p, root).encode()).hexdigest())


class _Collector:
    """Accumulates documents up to a byte cap; records what each source contributed."""

    def __init__(self, cap: int):
        self.cap, self.total, self.docs, self.sources, self._seen = cap, 0, [], [], set()

    @property
    def full(self) -> bool:
        return self.total >= self.cap

    def source(self, kind: str, pattern: str, texts: Iterator[bytes]) -> None:
        files = nbytes = 0
        for raw in texts:
            if self.full:
                break
            raw = raw.replace(b"\0", b"")
            digest = hashlib.sha1(raw).digest()
            if not raw.strip() or digest in self._seen:  # licence files repeat across packages
                continue
            self._seen.add(digest)
            raw = raw[: self.cap - self.total]
            self.docs.append(raw)
            self.total += len(raw)
            files += 1
            nbytes += len(raw)
        if files:
            self.sources.append({"kind": kind, "pattern": pattern, "files": files, "bytes": nbytes})


def _read_all(paths: list[str], limit: int) -> Iterator[bytes]:
    for p in paths:
        try:
            with (gzip.open if p.endswith(".gz") else open)(p, "rb") as f:
                yield f.read(limit)  # a huge file costs no more than the domain's cap
        except (OSError, EOFError, gzip.BadGzipFile):
            continue


_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "pydoc_data"}


@functools.lru_cache(maxsize=1)
def _stdlib_files() -> tuple[str, list[str]]:
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in _SKIP_DIRS and not x.startswith(("lib-dynload", "config-"))]
        out.extend(os.path.join(d, f) for f in files if f.endswith(".py"))
    return root, _hashed(out, root)


def _python_stdlib(c: _Collector) -> None:
    root, files = _stdlib_files()
    c.source("python_source", f"{root}/**/*.py (no tests, no site-packages)", _read_all(files, c.cap))


def _docstrings(c: _Collector, source_cap: int) -> None:
    root, files = _stdlib_files()

    def texts():
        parsed = 0
        for raw in _read_all(files, source_cap):
            if parsed >= source_cap:
                return
            parsed += len(raw)
            try:
                tree = ast.parse(raw)
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                    doc = ast.get_docstring(node, clean=True)
                    if doc and len(doc) > 40:  # one-liners like "Return x." add little text
                        yield doc.encode("utf-8", errors="replace")
    c.source("ast_docstrings", f"{root}/**/*.py docstrings (first {source_cap} source bytes)", texts())


def _licenses(c: _Collector) -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    c.source("python_license", f"{stdlib}/LICENSE.txt", _read_all([os.path.join(stdlib, "LICENSE.txt")], c.cap))
    common = "/usr/share/common-licenses"
    paths = sorted({os.path.realpath(p) for p in glob.glob(f"{common}/*") if os.path.isfile(p)})
    c.source("debian_common_licenses", f"{common}/*", _read_all(_hashed(paths, common), c.cap))
    for sp in sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}):
        pats = [f"{sp}/*.dist-info/LICEN[CS]E*", f"{sp}/*.dist-info/COPYING*", f"{sp}/*.dist-info/licenses/**/*"]
        paths = sorted({p for pat in pats for p in glob.glob(pat, recursive=True) if os.path.isfile(p)})
        c.source("python_package_licenses", f"{sp}/*.dist-info/{{LICENSE*,COPYING*,licenses/*}}",
                 _read_all(_hashed(paths, sp), c.cap))
    paths = glob.glob("/usr/share/doc/*/copyright")
    c.source("debian_copyright", "/usr/share/doc/*/copyright", _read_all(_hashed(paths, "/usr/share/doc"), c.cap))


def _docs_text(c: _Collector) -> None:
    from pydoc_data.topics import topics  # the interpreter's own `help()` topics, prose
    c.source("pydoc_topics", f"{sysconfig.get_paths()['stdlib']}/pydoc_data/topics.py",
             (topics[k].encode("utf-8") for k in sorted(topics)))
    paths = [p for p in glob.glob("/usr/share/info/*.info*") if os.path.isfile(p)]
    c.source("gnu_info_manuals", "/usr/share/info/*.info*",
             (t.replace(b"\x1f", b"\n") for t in _read_all(_hashed(paths, "/usr/share/info"), c.cap)))


def _user_corpus(c: _Collector, name: str, directory: str, skipped: list[str]) -> None:
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"data.corpora.{name}", f"{directory} is not a directory")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".txt", ".jsonl", ".parquet"))
    if not files:
        raise ConfigError(f"data.corpora.{name}", f"no .txt, .jsonl or .parquet files under {directory}")
    by_kind = {k: [p for p in files if p.suffix == k] for k in (".txt", ".jsonl", ".parquet")}
    c.source("txt", f"{root}/**/*.txt", _read_all([str(p) for p in by_kind[".txt"]], c.cap))
    c.source("jsonl", f"{root}/**/*.jsonl (field 'text')", _jsonl_texts(by_kind[".jsonl"], skipped))
    if by_kind[".parquet"]:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            skipped.append(f"{len(by_kind['.parquet'])} .parquet files under {root}: pyarrow is not installed")
        else:
            c.source("parquet", f"{root}/**/*.parquet (column 'text')", _parquet_texts(pq, by_kind[".parquet"]))
    if not c.docs:
        raise ConfigError(f"data.corpora.{name}", f"no readable text under {directory}")


def _jsonl_texts(paths: list[Path], skipped: list[str]) -> Iterator[bytes]:
    for p in paths:
        bad = 0
        with open(p, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    text = json.loads(line)["text"]
                    if not isinstance(text, str):
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    bad += int(bool(line.strip()))
                    continue
                yield text.encode("utf-8")
        if bad:
            skipped.append(f"{p}: {bad} lines without a string 'text' field")


def _parquet_texts(pq, paths: list[Path]) -> Iterator[bytes]:
    for p in paths:
        for batch in pq.ParquetFile(p).iter_batches(columns=["text"], batch_size=1024):  # lazily: stops at cap
            for text in batch.column(0).to_pylist():
                if isinstance(text, str):
                    yield text.encode("utf-8")


def load_domains(cfg: DataSection) -> list[Domain]:
    """Read every configured domain (built-ins first, then user corpora in name order)."""
    readers = {"python_stdlib": _python_stdlib, "licenses": _licenses, "docs_text": _docs_text,
               "docstrings": lambda c: _docstrings(c, cfg.docstring_source_bytes)}
    domains = []
    for name in cfg.builtin_domains:
        c = _Collector(cfg.max_bytes_per_domain)
        readers[name](c)
        domains.append(_finish(name, c, cfg.eval_fraction, builtin=True, skipped=[]))
    for name in sorted(cfg.corpora):
        c, skipped = _Collector(cfg.max_bytes_per_domain), []
        _user_corpus(c, name, cfg.corpora[name], skipped)
        domains.append(_finish(name, c, cfg.eval_fraction, builtin=False, skipped=skipped))
    if not domains:
        raise ConfigError("data.builtin_domains", "no domains configured")
    return domains


def _finish(name: str, c: _Collector, eval_fraction: float, builtin: bool, skipped: list[str]) -> Domain:
    if not c.docs:
        raise ConfigError(f"data.domains.{name}", "found no text on this machine")
    sep = bytes([SEPARATOR_ID])
    allb = np.frombuffer(sep.join(c.docs) + sep, dtype=np.uint8)
    cut = allb.size - int(allb.size * eval_fraction)
    return Domain(name, allb[:cut], allb[cut:], len(c.docs), c.sources, builtin, skipped)
