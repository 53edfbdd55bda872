"""Training data: named text domains found offline, a byte tokenizer, and a deterministic mixture sampler.

Built-in domains come from files every Debian + CPython install has (the standard library, its help topics,
licence texts); user corpora are directories of .txt / .jsonl / .parquet files, one directory per domain.
Each batch is a pure function of (seed, batch index, mixture weights), so save/restore and skip are exact.
"""

from __future__ import annotations

import ast
import glob
import gzip
import functools
import hashlib
import json
import math
import os
import re
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from training.errors import ConfigError

BUILTIN_DOMAINS = ("python_stdlib", "docstrings", "licenses", "docs_text")
DOMAIN_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")  # becomes part of metric names
SEPARATOR_ID = 0  # NUL never occurs in text (stripped on load), so it marks document boundaries


# ---------------------------------------------------------------------------------------------- config
@dataclass(frozen=True)
class StageConfig:
    name: str  # shown on the dashboard as mixture/stage
    fraction: float  # share of the token budget this stage lasts; fractions of all stages sum to 1
    weights: Mapping[str, float]  # domain -> relative weight (normalised); unnamed domains get 0


PRETRAIN_WEIGHTS = {"python_stdlib": 0.45, "docstrings": 0.15, "licenses": 0.2, "docs_text": 0.2}
MIDTRAIN_WEIGHTS = {"python_stdlib": 0.25, "docstrings": 0.35, "licenses": 0.05, "docs_text": 0.35}


@dataclass(frozen=True)
class DataConfig:
    builtin_domains: tuple[str, ...] = BUILTIN_DOMAINS  # which built-in domains to load
    corpora: Mapping[str, str] = field(default_factory=dict)  # user domain name -> directory of files
    max_bytes_per_domain: int = 4_000_000  # read cap per domain, keeps start-up under ~2 s
    docstring_source_bytes: int = 2_000_000  # source parsed for docstrings; ast runs at ~3 MB/s
    eval_fraction: float = 0.02  # tail of each domain held out for eval batches
    stages: tuple[StageConfig, ...] | None = None  # None: pretrain 80% / midtrain 20% (default_stages)


def default_stages(domain_names: Sequence[str]) -> tuple[StageConfig, ...]:
    """Pretrain 80% then midtrain 20%; user domains get an even share in both stages."""
    share = 1.0 / max(1, len(domain_names))

    def weights(preset: Mapping[str, float]) -> dict[str, float]:
        return {d: preset.get(d, share) for d in domain_names}
    return (StageConfig("pretrain", 0.8, weights(PRETRAIN_WEIGHTS)),
            StageConfig("midtrain", 0.2, weights(MIDTRAIN_WEIGHTS)))


def validate_stages(stages: Sequence[StageConfig], domain_names: Sequence[str]) -> None:
    if not stages:
        raise ConfigError("data.stages", "at least one stage is needed")
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ConfigError("data.stages", f"stage names must be unique, got {names}")
    for i, s in enumerate(stages):
        if not (isinstance(s.fraction, (int, float)) and 0 < s.fraction <= 1):
            raise ConfigError(f"data.stages[{i}].fraction", f"must be in (0, 1], got {s.fraction!r}")
        _weights_vector(s.weights, domain_names, f"data.stages[{i}].weights")
    total = sum(s.fraction for s in stages)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError("data.stages", f"stage fractions must sum to 1, got {total:g}")


def _weights_vector(weights: Mapping[str, float], domain_names: Sequence[str], key: str) -> np.ndarray:
    if not isinstance(weights, Mapping):
        raise ConfigError(key, "must be a table of domain -> weight")
    for name, w in weights.items():
        if name not in domain_names:
            raise ConfigError(f"{key}.{name}", f"unknown domain (known: {', '.join(domain_names)})")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ConfigError(f"{key}.{name}", f"weight must be a finite number >= 0, got {w!r}")
    vec = np.array([float(weights.get(d, 0.0)) for d in domain_names], dtype=np.float64)
    if vec.sum() <= 0:
        raise ConfigError(key, "at least one weight must be > 0")
    return vec / vec.sum()


# ---------------------------------------------------------------------------------------------- tokenizer
class ByteTokenizer:
    """UTF-8 bytes as tokens. No training, no files, identical everywhere."""

    name = "byte-utf8"
    vocab_size = 256
    separator_id = SEPARATOR_ID

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if int(i) != SEPARATOR_ID).decode("utf-8", errors="replace")

    def describe(self) -> dict:
        return {"name": self.name, "vocab_size": self.vocab_size, "separator_id": self.separator_id}


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


def load_domains(cfg: DataConfig) -> list[Domain]:
    """Read every configured domain (built-ins first, then user corpora in name order)."""
    if cfg.max_bytes_per_domain < 1024:
        raise ConfigError("data.max_bytes_per_domain", "must be at least 1024")
    if not 0 <= cfg.eval_fraction < 0.5:
        raise ConfigError("data.eval_fraction", f"must be in [0, 0.5), got {cfg.eval_fraction!r}")
    readers = {"python_stdlib": _python_stdlib, "licenses": _licenses, "docs_text": _docs_text,
               "docstrings": lambda c: _docstrings(c, cfg.docstring_source_bytes)}
    domains = []
    for name in cfg.builtin_domains:
        if name not in readers:
            raise ConfigError("data.builtin_domains", f"unknown domain {name!r} (known: {', '.join(BUILTIN_DOMAINS)})")
        c = _Collector(cfg.max_bytes_per_domain)
        readers[name](c)
        domains.append(_finish(name, c, cfg.eval_fraction, builtin=True, skipped=[]))
    for name in sorted(cfg.corpora):
        if not DOMAIN_NAME_RE.match(name) or name in cfg.builtin_domains:
            raise ConfigError(f"data.corpora.{name}", "domain names are letters, digits, _ . - and must be unique")
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


# ---------------------------------------------------------------------------------------------- sampler
class Batch(NamedTuple):
    tokens_BxL: np.ndarray  # int32 [batch, seq_len + 1]; inputs = [:, :-1], targets = [:, 1:]
    domain_ids_B: np.ndarray  # int32 [batch], index into sampler.domain_names
    stage: int  # index into sampler.stage_names
    index: int  # position in the sampler's stream (skipped batches count)


class MixtureSampler:
    """Draws each row's domain by the current stage's weights, then a uniform window from that domain.

    Batch i depends only on (seed, i, weights), so restore and skip are exact. The stage is chosen by tokens
    actually returned (tokens seen), not by stream position: skipped batches do not move the stage on.
    """

    def __init__(self, domains: Sequence[Domain], stages: Sequence[StageConfig] | None, seq_len: int,
                 batch_size: int, seed: int, *, token_budget: int):
        self.domains = list(domains)
        self.domain_names = [d.name for d in self.domains]
        stages = tuple(stages) if stages else default_stages(self.domain_names)
        validate_stages(stages, self.domain_names)
        if seq_len < 1 or batch_size < 1:
            raise ConfigError("data.seq_len" if seq_len < 1 else "data.batch_size", "must be >= 1")
        for d in self.domains:
            if d.tokens.size < seq_len + 2:
                raise ConfigError(f"data.domains.{d.name}", f"{d.tokens.size} tokens < seq_len + 2 ({seq_len + 2})")
        self.stages, self.seq_len, self.batch_size, self.seed = stages, seq_len, batch_size, int(seed)
        self.stage_names = [s.name for s in stages]
        self._stage_weights = np.stack([_weights_vector(s.weights, self.domain_names, "data.stages") for s in stages])
        self._all = np.concatenate([d.tokens for d in self.domains])
        self._base = np.cumsum([0] + [d.tokens.size for d in self.domains[:-1]]).astype(np.int64)
        self._windows = np.array([d.tokens.size - seq_len for d in self.domains], dtype=np.int64)
        self._window = np.arange(seq_len + 1, dtype=np.int64)
        self.batch_index = 0
        self.tokens_seen = 0
        self.set_token_budget(token_budget)
        self.domain_tokens = np.zeros(len(self.domains), dtype=np.int64)
        self._override = np.zeros_like(self._stage_weights)  # set-mixture weights per stage
        self._has_override = np.zeros(len(stages), dtype=np.int32)
        self.load_seconds: float | None = None  # set by build_sampler

    # -- stream
    @property
    def tokens_per_batch(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def stage(self) -> int:
        ends = self.stage_ends()
        return next((i for i, end in enumerate(ends) if self.tokens_seen < end), len(ends) - 1)

    def weights(self) -> dict[str, float]:
        return dict(zip(self.domain_names, self._current_weights().tolist()))

    def _current_weights(self) -> np.ndarray:
        s = self.stage
        return self._override[s] if self._has_override[s] else self._stage_weights[s]

    def next_batch(self) -> Batch:
        stage, w = self.stage, self._current_weights()
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, self.batch_index])))
        # searchsorted on the cumulative weights + random(): stable across numpy versions, unlike choice().
        cum = np.cumsum(w)
        ids = np.minimum(np.searchsorted(cum, rng.random(self.batch_size) * cum[-1], side="right"), len(w) - 1)
        while np.any(w[ids] == 0):  # a float edge landing on a zero-weight domain: redraw those rows
            bad = w[ids] == 0
            ids[bad] = np.minimum(np.searchsorted(cum, rng.random(int(bad.sum())) * cum[-1], side="right"),
                                  len(w) - 1)
        starts = self._base[ids] + (rng.random(self.batch_size) * self._windows[ids]).astype(np.int64)
        tokens = self._all[starts[:, None] + self._window].astype(np.int32)
        batch = Batch(tokens, ids.astype(np.int32), stage, self.batch_index)
        self.batch_index += 1
        self.tokens_seen += self.tokens_per_batch
        np.add.at(self.domain_tokens, ids, self.seq_len)
        return batch

    def __iter__(self) -> Iterator[Batch]:
        while True:
            yield self.next_batch()

    def skip(self, n: int) -> None:
        """Skip the next n batches of the stream (after a rollback past bad data); tokens seen stay."""
        if n < 0:
            raise ValueError(f"cannot skip {n} batches")
        self.batch_index += int(n)

    # -- operator commands (each returns an event payload)
    def set_weights(self, weights: Mapping[str, float]) -> dict:
        """Replace the current stage's mixture; unnamed domains get 0. Later stages keep their own."""
        vec = _weights_vector(weights, self.domain_names, "mixture")
        old, s = self.weights(), self.stage
        self._override[s], self._has_override[s] = vec, 1
        return {"stage": self.stage_names[s], "old": old, "new": self.weights(), "batch_index": self.batch_index}

    def set_token_budget(self, token_budget: int) -> dict:
        if isinstance(token_budget, bool) or not isinstance(token_budget, (int, np.integer)) or token_budget <= 0:
            raise ConfigError("token_budget", f"must be a positive integer, got {token_budget!r}")
        old = getattr(self, "token_budget", None)
        old_stage = self.stage if old is not None else None
        self.token_budget = int(token_budget)
        return {"old_budget": old, "new_budget": self.token_budget, "stage_before": old_stage,
                "stage_after": self.stage, "stage_ends": self.stage_ends()}

    def stage_ends(self) -> list[int]:
        # Whole tokens, rounded, so 80% of 10 batches is exactly 8 batches despite float fractions.
        return [int(round(x)) for x in np.cumsum([s.fraction for s in self.stages]) * self.token_budget]

    # -- checkpointing: plain ints and fixed-shape arrays, so orbax can restore into a template
    def state_dict(self) -> dict:
        return {"seed": np.int64(self.seed), "batch_index": np.int64(self.batch_index),
                "tokens_seen": np.int64(self.tokens_seen), "token_budget": np.int64(self.token_budget),
                "domain_tokens": self.domain_tokens.copy(), "weight_override": self._override.copy(),
                "has_override": self._has_override.copy()}

    def load_state_dict(self, state: Mapping) -> None:
        ov = np.asarray(state["weight_override"], dtype=np.float64)
        if ov.shape != self._override.shape:
            raise ConfigError("data", f"checkpointed sampler has {ov.shape[0]} stages x {ov.shape[1]} domains, "
                                      f"this config has {len(self.stages)} x {len(self.domains)}")
        self.seed = int(state["seed"])
        self.batch_index = int(state["batch_index"])
        self.tokens_seen = int(state["tokens_seen"])
        self.token_budget = int(state["token_budget"])
        self.domain_tokens = np.asarray(state["domain_tokens"], dtype=np.int64).copy()
        self._override = ov.copy()
        self._has_override = np.asarray(state["has_override"], dtype=np.int32).copy()

    # -- reporting
    def metrics(self) -> dict[str, float]:
        out = {f"mixture/weight/{d}": w for d, w in self.weights().items()}
        out["mixture/stage"] = float(self.stage)
        out.update({f"data/tokens_seen/{d}": float(n) for d, n in zip(self.domain_names, self.domain_tokens)})
        return out

    def eval_batches(self, batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Per domain, a fixed [batch, seq_len + 1] batch of evenly spaced held-out windows (no randomness)."""
        b, out = batch_size or self.batch_size, {}
        for d in self.domains:
            src = d.eval_tokens if d.eval_tokens.size >= self.seq_len + 1 else d.tokens  # tiny domain: reuse
            starts = np.linspace(0, src.size - self.seq_len - 1, b).astype(np.int64)
            out[d.name] = src[starts[:, None] + self._window].astype(np.int32)
        return out

    def manifest(self, tokenizer: ByteTokenizer | None = None) -> dict:
        ends = self.stage_ends()
        return {"tokenizer": (tokenizer or ByteTokenizer()).describe(), "seq_len": self.seq_len,
                "batch_size": self.batch_size, "seed": self.seed, "token_budget": self.token_budget,
                "load_seconds": self.load_seconds, "domains": [d.describe() for d in self.domains],
                "stages": [{"name": s.name, "fraction": s.fraction, "start_tokens": ([0] + ends)[i],
                            "end_tokens": ends[i],
                            "weights": dict(zip(self.domain_names, self._stage_weights[i].tolist()))}
                           for i, s in enumerate(self.stages)]}


def build_sampler(cfg: DataConfig, seq_len: int, batch_size: int, seed: int, token_budget: int) -> MixtureSampler:
    """Load the domains and build the sampler; `manifest()["load_seconds"]` says how long loading took."""
    t0 = time.perf_counter()
    domains = load_domains(cfg)
    sampler = MixtureSampler(domains, cfg.stages, seq_len, batch_size, seed, token_budget=token_budget)
    sampler.load_seconds = time.perf_counter() - t0
    return sampler
