"""`python -m training data prepare`: the run's sources as tokenized, shuffled token shards plus a JSON index.

Layout of the output directory (every byte a function of the sources, the config and the shuffle seed, so
preparing twice gives identical files):

    index.json                    format, tokenizer, settings, and per domain: documents, token counts, hashes, shards
    tokenizer.json                the BPE trained here on the domains' training parts (data.tokenizer = "bpe")
    <domain>/train-00000.npy ...  the training tokens, documents in shuffled order, `shard_tokens` ids per file
    <domain>/eval-00000.npy ...   the held-out tail, in source order (the same split as the in-memory path)

Each domain has `text_sha256` (its documents as read), `tokenizer_sha256` and `sha256`, the hash of both plus the
split and shuffle settings: what a checkpoint records and a resume compares (training.train). Token ids are
uint16 when the vocabulary fits, else uint32. training.shards reads the directory back.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

import numpy as np

from training.config import RunConfig
from training.errors import ConfigError
from training.sources import RawDomain, collect_domains
from training.tokenizer import SEPARATOR_ID, BpeTokenizer, ByteTokenizer

FORMAT = 1
KIND = "observatory-prepared-data"
INDEX = "index.json"
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_SHARD_TOKENS = 1 << 20
# The data settings a prepared directory was made from; the trainer refuses a config that differs in any of them.
SETTINGS = ("builtin_domains", "corpora", "max_bytes_per_domain", "docstring_source_bytes", "eval_fraction",
            "text_field", "tokenizer")


def settings_of(data) -> dict:
    d = {k: getattr(data, k) for k in SETTINGS}
    d["builtin_domains"] = list(d["builtin_domains"])
    d["corpora"] = {k: str(Path(v).absolute()) for k, v in sorted(d["corpora"].items())}
    return d


def text_sha256(docs: list[bytes]) -> str:
    """The in-memory path's hash of a domain's text (training.sources.tokenize_domains)."""
    sep = bytes([SEPARATOR_ID])
    return hashlib.sha256(sep.join(docs) + sep).hexdigest()[:16]


def content_sha256(text_hash: str, tokenizer_hash: str, eval_fraction: float, shuffle_seed: int) -> str:
    key = f"text={text_hash};tokenizer={tokenizer_hash};eval_fraction={eval_fraction!r};shuffle_seed={shuffle_seed}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class ProgressBar:
    """One line on stderr: a bar redrawn in place on a terminal, a line per 10% (and per phase) elsewhere."""

    def __init__(self, total: float, stream: TextIO | None = None, width: int = 30):
        self.total, self.stream, self.width = max(total, 1e-9), stream or sys.stderr, width
        self.done, self._tty = 0.0, self.stream.isatty()
        self._last: tuple[int, str] | None = None

    def advance(self, amount: float, label: str) -> None:
        self.done = min(self.total, self.done + amount)
        frac = self.done / self.total
        bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
        line = f"prepare [{bar}] {frac * 100:5.1f}% {label}"
        if self._tty:
            self.stream.write("\r" + line[:160].ljust(100))
            self.stream.flush()
        elif self._last is None or int(frac * 10) != self._last[0] or label != self._last[1]:
            self.stream.write(line + "\n")
            self.stream.flush()
        self._last = (int(frac * 10), label)

    def close(self) -> None:
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()


def _split(arrays: list[np.ndarray], eval_fraction: float) -> tuple[list[np.ndarray], np.ndarray]:
    """Documents -> (training pieces, held-out tail): the tail is eval_fraction of the ids of the in-order stream,
    as in the in-memory path; a document cut by the boundary gives its head to training."""
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    total = int(sizes.sum())
    cut = total - int(total * eval_fraction)
    ends = np.cumsum(sizes)
    k = int(np.searchsorted(ends, cut, side="left"))  # the document holding id cut - 1
    train = list(arrays[:k])
    tail = list(arrays[k + 1:])
    if k < len(arrays):
        start = int(ends[k] - sizes[k])
        head, rest = arrays[k][: cut - start], arrays[k][cut - start:]
        if head.size:
            train.append(head)
        tail.insert(0, rest)
    dtype = arrays[0].dtype if arrays else np.uint16
    return train, (np.concatenate(tail) if tail else np.zeros(0, dtype))


def _shuffled(pieces: list[np.ndarray], seed: int, name: str) -> np.ndarray:
    """The training documents concatenated in an order fixed by (seed, domain name) on every machine."""
    if not pieces:
        return np.zeros(0, np.uint16)
    salt = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, salt])))
    order = np.argsort(rng.random(len(pieces)), kind="stable")  # random() is stable across numpy versions
    return np.concatenate([pieces[i] for i in order])


def _write_shards(tokens: np.ndarray, directory: Path, rel: str, stem: str, shard_tokens: int) -> list[dict]:
    out = []
    for i, at in enumerate(range(0, max(tokens.size, 1), shard_tokens)):
        part = np.ascontiguousarray(tokens[at: at + shard_tokens])
        if not part.size:
            break
        name = f"{rel}/{stem}-{i:05d}.npy"
        path = directory / name
        np.save(path, part, allow_pickle=False)
        out.append({"file": name, "tokens": int(part.size),
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16]})
    return out


def prepare(cfg: RunConfig, out: str | Path, *, shard_tokens: int = DEFAULT_SHARD_TOKENS, shuffle_seed: int = 0,
            progress: ProgressBar | None = None, stream: TextIO | None = None) -> dict:
    """Write the prepared directory `out` (replacing an older one only once the new one is complete); its index."""
    if shard_tokens < 1024:
        raise ConfigError("--shard-tokens", f"must be at least 1024, got {shard_tokens}")
    data = cfg.data
    out = Path(out).absolute()
    names = data.domain_names
    bpe = data.tokenizer == "bpe"
    bar = progress or ProgressBar(3 * len(names) + (2 * len(names) if bpe else 0), stream)
    raw: list[RawDomain] = []
    for name in names:
        bar.advance(0, f"reading {name}")
        # One domain at a time so the bar moves; collect_domains' order and checks are kept.
        sub = dataclasses.replace(data, builtin_domains=tuple(d for d in data.builtin_domains if d == name),
                                  corpora={k: v for k, v in data.corpora.items() if k == name}, mixture={})
        raw.extend(collect_domains(sub))
        bar.advance(1, f"read {name} ({sum(len(d) for d in raw[-1].docs) / 1e6:.1f} MB)")
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        if bpe:
            bar.advance(0, f"training a {cfg.model.vocab_size}-id BPE")
            tok = BpeTokenizer.train([d for r in raw for d in r.train_docs(data.eval_fraction)], cfg.model.vocab_size)
            tok.save(tmp / TOKENIZER_FILE)
            bar.advance(2 * len(names), f"trained the BPE ({tok.vocab_size} ids)")
        else:
            tok = ByteTokenizer()
        dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
        domains = []
        for r in raw:
            arrays: list[np.ndarray] = []
            chunk = max(1, len(r.docs) // 20)
            for i in range(0, len(r.docs), chunk):
                arrays.extend(a.astype(dtype, copy=False) for a in tok.encode_each(r.docs[i: i + chunk]))
                bar.advance(min(chunk, len(r.docs) - i) / len(r.docs), f"tokenizing {r.name}")
            train_pieces, eval_tokens = _split(arrays, data.eval_fraction)
            train = _shuffled(train_pieces, shuffle_seed, r.name).astype(dtype, copy=False)
            (tmp / r.name).mkdir()
            text_hash = text_sha256(r.docs)
            domains.append({
                "name": r.name, "builtin": r.builtin, "sources": r.sources, "skipped": r.skipped,
                "documents": len(r.docs), "bytes": int(sum(len(d) for d in r.docs)),
                "tokens": int(train.size + eval_tokens.size), "train_tokens": int(train.size),
                "eval_tokens": int(eval_tokens.size), "text_sha256": text_hash, "tokenizer_sha256": tok.sha256,
                "sha256": content_sha256(text_hash, tok.sha256, data.eval_fraction, shuffle_seed),
                "train_shards": _write_shards(train, tmp, r.name, "train", shard_tokens),
                "eval_shards": _write_shards(eval_tokens, tmp, r.name, "eval", shard_tokens)})
            bar.advance(1, f"wrote {r.name} ({train.size + eval_tokens.size:,} tokens)")
        index = {"format": FORMAT, "kind": KIND,
                 "tokenizer": {**tok.describe(), "sha256": tok.sha256, "file": TOKENIZER_FILE if bpe else None},
                 "dtype": np.dtype(dtype).name, "shard_tokens": shard_tokens, "shuffle_seed": shuffle_seed,
                 "settings": settings_of(data), "domains": domains}
        (tmp / INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        if out.exists():
            out.rename(old)
        tmp.rename(out)
        if old.exists():
            shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        bar.close()
    return index


def default_out(cfg: RunConfig) -> Path:
    return Path(cfg.data.prepared) if cfg.data.prepared else Path("var/data") / cfg.run.name


def main(ns) -> int:
    """The `data prepare` command: 0 written, 2 config error (the bad key named)."""
    from training.config import load, parse_override

    try:
        cfg = load(ns.config, dict(parse_override(t) for t in ns.set))
        out = Path(ns.out) if ns.out else default_out(cfg)
        t0 = time.perf_counter()
        index = prepare(cfg, out, shard_tokens=ns.shard_tokens, shuffle_seed=ns.shuffle_seed)
    except ConfigError as e:
        print(e.line(), file=sys.stderr)
        return 2
    print(f"prepared {len(index['domains'])} domains in {time.perf_counter() - t0:.1f} s -> {out.absolute()} "
          f"(tokenizer {index['tokenizer']['name']}, {index['tokenizer']['vocab_size']} ids, "
          f"sha256 {index['tokenizer']['sha256']})")
    for d in index["domains"]:
        print(f"  {d['name']:<16} {d['documents']:>6} docs {d['bytes'] / 1e6:7.2f} MB {d['train_tokens']:>10,} train "
              f"+ {d['eval_tokens']:>8,} eval tokens in {len(d['train_shards'])} shard(s)  sha256 {d['sha256']}"
              + (f"  skipped: {'; '.join(d['skipped'])}" if d["skipped"] else ""))
    print(f"train from it with: --set data.prepared={json.dumps(str(out))}")
    return 0
