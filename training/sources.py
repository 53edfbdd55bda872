"""Training text, read offline: built-in domains identical on every machine, and user corpora.

Built-in domains come from files inside pinned runtime packages (SOURCE_PACKAGES at the versions
requirements.txt pins, refused otherwise): their Python source, its docstrings, their licence files, and their
READMEs and prose files. `python_stdlib` (the interpreter's own library) is an optional, host-dependent domain;
user corpora are directories of .txt / .jsonl / .parquet files, one directory per domain. Text is tokenized as
UTF-8 bytes, documents are joined by a NUL separator, and the tail of each domain is held out for evaluation.
"""

from __future__ import annotations

import ast
import functools
import glob
import gzip
import hashlib
import importlib.metadata
import json
import os
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from training.config import DataSection
from training.errors import ConfigError
from training.tokenizer import SEPARATOR_ID, ByteTokenizer

TOKENIZER = ByteTokenizer().describe()  # the default: UTF-8 bytes as tokens, NUL between documents


# ---------------------------------------------------------------------------------------------- sources
@dataclass
class Domain:
    name: str
    tokens: np.ndarray  # token ids (uint8 bytes or uint16 BPE), documents joined by the separator, train part
    eval_tokens: np.ndarray  # the held-out tail of the same stream
    documents: int
    sources: list[dict]  # {"kind", "pattern", "files", "bytes"} per source actually read
    builtin: bool
    skipped: list[str] = field(default_factory=list)
    text_sha256: str = ""  # of the text itself (documents NUL-joined), whatever the tokenizer

    def describe(self) -> dict:
        n = int(self.tokens.size + self.eval_tokens.size)
        return {"name": self.name, "builtin": self.builtin, "sources": self.sources, "documents": self.documents,
                "bytes": int(sum(s["bytes"] for s in self.sources)), "tokens": n,
                "train_tokens": int(self.tokens.size), "eval_tokens": int(self.eval_tokens.size),
                "sha256": self.text_sha256, "skipped": self.skipped}


@dataclass
class RawDomain:
    """A domain's documents before tokenization."""
    name: str
    docs: list[bytes]
    sources: list[dict]
    builtin: bool
    skipped: list[str]

    def train_docs(self, eval_fraction: float) -> list[bytes]:
        """The documents that start before the held-out tail (what a tokenizer may be trained on)."""
        cut, at, out = (1 - eval_fraction) * sum(len(d) + 1 for d in self.docs), 0, []
        for d in self.docs:
            if at >= cut:
                break
            out.append(d)
            at += len(d) + 1
        return out


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

# Hand-written, well-documented pinned runtime packages whose files make the built-in domains: the same bytes on
# every machine with the pinned requirements (generated code such as plotly's validators is left out).
SOURCE_PACKAGES = ("Django", "numpy", "jax", "optax", "orbax-checkpoint", "celery", "redis", "channels", "daphne",
                   "psutil")
REQUIREMENTS = Path(__file__).resolve().parents[1] / "requirements.txt"
# Files a binary wheel generates for its platform: numpy's build configuration (compiler, CPU, OS) and its licence
# file, which lists the native libraries bundled in that wheel (OpenBLAS .so on Linux, others on macOS/Windows).
# They differ between platforms at the same pinned version, so they are left out.
_PLATFORM_FILES = {"numpy": ("numpy/__config__.py", ".dist-info/licenses/LICENSE.txt")}


@functools.lru_cache(maxsize=1)
def pinned_versions() -> dict[str, str]:
    """name (lower case) -> version pinned in requirements.txt."""
    out = {}
    try:
        lines = REQUIREMENTS.read_text().splitlines()
    except OSError as e:
        raise ConfigError("data.builtin_domains", f"cannot read the pins in {REQUIREMENTS}: {e}") from None
    for line in lines:
        spec = line.split("#", 1)[0].strip()
        if "==" in spec:
            name, version = spec.split("==", 1)
            out[name.split("[", 1)[0].strip().lower()] = version.strip()
    return out


@functools.lru_cache(maxsize=1)
def _pinned_dists() -> tuple:
    """The installed distributions of SOURCE_PACKAGES, each at exactly its pinned version, else ConfigError."""
    pins, out = pinned_versions(), []
    for name in SOURCE_PACKAGES:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError("data.builtin_domains", f"{name} is not installed (pip install -r {REQUIREMENTS.name})") \
                from None
        if pins.get(name.lower()) != dist.version:
            raise ConfigError("data.builtin_domains", f"{name} {dist.version} is installed but {REQUIREMENTS.name} "
                                                      f"pins {pins.get(name.lower())}: the built-in text would differ "
                                                      f"from other machines' (pip install -r {REQUIREMENTS.name})")
        out.append(dist)
    return tuple(out)


def _dist_files(kind: str) -> list[tuple[str, str]]:
    """(label, absolute path) of one kind of file in the pinned packages, in a fixed order independent of the host:
    "py" sources (no tests), "license" files of the dist-info, "doc" text (.rst/.txt/.md outside the dist-info).
    `dist.metadata` parses the METADATA file on every access: read once per package, not once per file."""
    out = []
    for dist in _pinned_dists():
        name_ver = f"{dist.metadata['Name']}=={dist.version}"
        platform_files = _PLATFORM_FILES.get(name_ver.split("==")[0].lower(), ())
        for f in dist.files or ():
            rel = str(f)
            in_info = ".dist-info/" in rel
            name = rel.rsplit("/", 1)[-1]
            if kind == "py":
                keep = rel.endswith(".py") and not in_info and not (set(rel.split("/")[:-1]) & _SKIP_DIRS)
            elif kind == "license":
                keep = in_info and any(k in name.upper() for k in ("LICEN", "COPYING"))
            else:
                keep = not in_info and rel.endswith((".rst", ".txt", ".md"))
            if keep and not rel.endswith(platform_files):
                out.append((f"{name_ver}/{rel}", str(f.locate())))
    return sorted(out, key=lambda x: hashlib.sha1(x[0].encode()).hexdigest())  # a byte cap samples every package


def _pattern(kind: str) -> str:
    return f"{kind} files of pinned " + ", ".join(f"{d.metadata['Name']}=={d.version}" for d in _pinned_dists())


def _python_source(c: _Collector) -> None:
    c.source("python_source", _pattern("py"), _read_all([p for _, p in _dist_files("py")], c.cap))


def _docstrings(c: _Collector, source_cap: int) -> None:
    def texts():
        parsed = 0
        for raw in _read_all([p for _, p in _dist_files("py")], source_cap):
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
    c.source("ast_docstrings", f"docstrings of the first {source_cap} bytes of " + _pattern("py"), texts())


def _licenses(c: _Collector) -> None:
    c.source("package_licenses", _pattern("license"), _read_all([p for _, p in _dist_files("license")], c.cap))


def _docs_text(c: _Collector) -> None:
    # Each package's long description (its README, in the METADATA file), then the prose files it ships.
    c.source("package_readmes", "METADATA descriptions of " + _pattern("package"),
             ((d.metadata.get_payload() or "").encode("utf-8") for d in _pinned_dists()))
    c.source("package_docs", _pattern("doc"), _read_all([p for _, p in _dist_files("doc")], c.cap))


@functools.lru_cache(maxsize=1)
def _stdlib_files() -> tuple[str, list[str]]:
    root = sysconfig.get_paths()["stdlib"]
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in _SKIP_DIRS and not x.startswith(("lib-dynload", "config-"))]
        out.extend(os.path.join(d, f) for f in files if f.endswith(".py"))
    return root, _hashed(out, root)


def _python_stdlib(c: _Collector) -> None:
    # Host-dependent (the interpreter's version): kept as an option, not a default domain.
    root, files = _stdlib_files()
    c.source("python_source", f"{root}/**/*.py (no tests, no site-packages)", _read_all(files, c.cap))


def _user_corpus(c: _Collector, name: str, directory: str, skipped: list[str], field: str = "text") -> None:
    root = Path(directory)
    if not root.is_dir():
        raise ConfigError(f"data.corpora.{name}", f"{directory} is not a directory")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".txt", ".jsonl", ".parquet"))
    if not files:
        raise ConfigError(f"data.corpora.{name}", f"no .txt, .jsonl or .parquet files under {directory}")
    by_kind = {k: [p for p in files if p.suffix == k] for k in (".txt", ".jsonl", ".parquet")}
    c.source("txt", f"{root}/**/*.txt", _read_all([str(p) for p in by_kind[".txt"]], c.cap))
    c.source("jsonl", f"{root}/**/*.jsonl (field {field!r})", _jsonl_texts(by_kind[".jsonl"], skipped, field))
    if by_kind[".parquet"]:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(f"data.corpora.{name}", f"{len(by_kind['.parquet'])} .parquet files under {root} need "
                                                      f"pyarrow (pip install -r {REQUIREMENTS.name})") from None
        c.source("parquet", f"{root}/**/*.parquet (column {field!r})",
                 _parquet_texts(pq, by_kind[".parquet"], name, field, skipped))
    if not c.docs:
        raise ConfigError(f"data.corpora.{name}", f"no readable text under {directory}")


def _jsonl_texts(paths: list[Path], skipped: list[str], field: str = "text") -> Iterator[bytes]:
    for p in paths:
        bad = 0
        with open(p, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    text = json.loads(line)[field]
                    if not isinstance(text, str):
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    bad += int(bool(line.strip()))
                    continue
                yield text.encode("utf-8")
        if bad:
            skipped.append(f"{p}: {bad} lines without a string {field!r} field")


def _parquet_texts(pq, paths: list[Path], name: str, field: str, skipped: list[str]) -> Iterator[bytes]:
    import pyarrow as pa

    for p in paths:
        try:
            f = pq.ParquetFile(p)
        except (pa.ArrowException, OSError) as e:
            raise ConfigError(f"data.corpora.{name}", f"{p} is not a readable Parquet file: {e}") from None
        if field not in f.schema_arrow.names:
            raise ConfigError(f"data.corpora.{name}", f"{p} has no column {field!r} (columns: "
                                                      f"{', '.join(f.schema_arrow.names)}; set data.text_field)")
        bad = 0
        for batch in f.iter_batches(columns=[field], batch_size=1024):  # lazily: stops at the cap
            for text in batch.column(0).to_pylist():
                if isinstance(text, str):
                    yield text.encode("utf-8")
                else:
                    bad += 1
        if bad:
            skipped.append(f"{p}: {bad} rows whose {field!r} is not a string")


def load_domains(cfg: DataSection, tokenizer=None) -> list[Domain]:
    """Read and tokenize every configured domain (bytes unless another tokenizer is given)."""
    return tokenize_domains(collect_domains(cfg), tokenizer or ByteTokenizer(), cfg.eval_fraction)


def tokenize_domains(raw: list[RawDomain], tokenizer, eval_fraction: float) -> list[Domain]:
    """Each domain's documents as one id stream, its tail (eval_fraction of the ids) held out."""
    out = []
    for r in raw:
        ids = tokenizer.encode_docs(r.docs)
        cut = ids.size - int(ids.size * eval_fraction)
        text_hash = hashlib.sha256(bytes([SEPARATOR_ID]).join(r.docs) + bytes([SEPARATOR_ID])).hexdigest()[:16]
        out.append(Domain(r.name, ids[:cut], ids[cut:], len(r.docs), r.sources, r.builtin, r.skipped, text_hash))
    return out


def collect_domains(cfg: DataSection) -> list[RawDomain]:
    """Read every configured domain (built-ins first, then user corpora in name order)."""
    readers = {"python_source": _python_source, "python_stdlib": _python_stdlib, "licenses": _licenses,
               "docs_text": _docs_text, "docstrings": lambda c: _docstrings(c, cfg.docstring_source_bytes)}
    domains = []
    for name in cfg.builtin_domains:
        c = _Collector(cfg.max_bytes_per_domain)
        readers[name](c)
        domains.append(_finish(name, c, builtin=True, skipped=[]))
    for name in sorted(cfg.corpora):
        c, skipped = _Collector(cfg.max_bytes_per_domain), []
        _user_corpus(c, name, cfg.corpora[name], skipped, cfg.text_field)
        domains.append(_finish(name, c, builtin=False, skipped=skipped))
    if not domains:
        raise ConfigError("data.builtin_domains", "no domains configured")
    return domains


def _finish(name: str, c: _Collector, builtin: bool, skipped: list[str]) -> RawDomain:
    if not c.docs:
        raise ConfigError(f"data.domains.{name}", "found no text on this machine")
    return RawDomain(name, c.docs, c.sources, builtin, skipped)
