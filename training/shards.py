"""The checkpointable loader of a prepared directory (training.prepare): `data.prepared = "DIR"`.

Rows are drawn as in the in-memory sampler (each row's domain from the stage's mixture, by (seed, batch index)),
but each domain is read sequentially: a cursor walks its shuffled token stream (the shards, memory-mapped, read
as one stream) in windows of seq_len + 1 ids that overlap by one, and wraps to the start for another epoch. The
cursors and epochs are part of the sampler's state, so they are in every checkpoint and a resume continues from
the exact token; a rollback's `skip_batches` advances them as those batches would have.

Our own loader rather than grain: a row is one slice of a memory-mapped array, the state is two small integer
arrays orbax saves with the rest of the train state, and every process of a multi-host job computes the same
global batch without a worker pool (grain is not a pinned dependency and was not measured here).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Mapping

import numpy as np

from training import prepare as prep
from training.config import DataSection
from training.errors import ConfigError
from training.sampler import MixtureSampler
from training.tokenizer import BpeTokenizer, ByteTokenizer


class ShardStream:
    """A domain's training tokens: its shard files, memory-mapped, read as one stream."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.offsets = np.cumsum([0] + [a.size for a in arrays]).astype(np.int64)
        self.size = int(self.offsets[-1])

    def read(self, start: int, n: int) -> np.ndarray:
        """ids [start, start + n) as int32 (a window may span two shards)."""
        out = np.empty(n, np.int32)
        i = int(np.searchsorted(self.offsets, start, side="right")) - 1
        filled, pos = 0, start
        while filled < n:
            a, lo = self.arrays[i], pos - int(self.offsets[i])
            take = min(n - filled, a.size - lo)
            out[filled: filled + take] = a[lo: lo + take]
            filled, pos, i = filled + take, pos + take, i + 1
        return out

    def __getitem__(self, idx):  # the sampler's eval fallback for a domain too small to hold out a window
        return np.concatenate(self.arrays)[idx]


class PreparedDomain:
    """One domain of a prepared directory, shaped as training.sources.Domain is for the sampler."""

    def __init__(self, entry: dict, tokens: ShardStream, eval_tokens: np.ndarray):
        self.entry, self.name, self.tokens, self.eval_tokens = entry, entry["name"], tokens, eval_tokens
        self.documents, self.sources, self.builtin = entry["documents"], entry["sources"], entry["builtin"]
        self.skipped, self.sha256 = entry["skipped"], entry["sha256"]

    def describe(self) -> dict:
        e = self.entry
        return {"name": self.name, "builtin": self.builtin, "sources": self.sources, "documents": self.documents,
                "bytes": e["bytes"], "tokens": e["tokens"], "train_tokens": e["train_tokens"],
                "eval_tokens": e["eval_tokens"], "sha256": e["sha256"], "text_sha256": e["text_sha256"],
                "tokenizer_sha256": e["tokenizer_sha256"], "shards": len(e["train_shards"]), "skipped": self.skipped}


class ShardSampler(MixtureSampler):
    """MixtureSampler whose rows are the next window of their domain's prepared stream (see the module doc)."""

    directory: Path

    def _init_streams(self) -> None:
        n = len(self.domains)
        self.cursor = np.zeros(n, np.int64)  # next window's first id, per domain
        self.epoch = np.zeros(n, np.int64)  # completed passes over the domain's training tokens

    def _advance(self, d: int) -> int:
        """Start of domain d's next window; moves its cursor (to the start again, next epoch, at the end)."""
        if self.cursor[d] + self.seq_len + 1 > self.domains[d].tokens.size:
            self.cursor[d] = 0
            self.epoch[d] += 1
        start = int(self.cursor[d])
        self.cursor[d] += self.seq_len
        return start

    def _rows(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.empty((self.batch_size, self.seq_len + 1), np.int32)
        for r, d in enumerate(ids):
            out[r] = self.domains[d].tokens.read(self._advance(int(d)), self.seq_len + 1)
        return out

    def skip(self, n: int) -> None:
        """Skip the next n batches: their rows' cursors move on as if read; tokens seen stay."""
        if n < 0:
            raise ValueError(f"cannot skip {n} batches")
        w = self._current_weights()  # tokens seen do not move during a skip, so neither does the stage
        for i in range(int(n)):
            ids, _ = self._draw_domains(self.batch_index + i, w)
            for d in ids:
                self._advance(int(d))
        self.batch_index += int(n)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "cursor": self.cursor.copy(), "epoch": self.epoch.copy()}

    def load_state_dict(self, state: Mapping) -> None:
        cursor = np.asarray(state["cursor"], dtype=np.int64)
        if cursor.shape != self.cursor.shape:
            raise ConfigError("data.prepared", f"checkpointed loader has {cursor.size} domains, this one "
                                               f"{self.cursor.size}")
        super().load_state_dict(state)
        self.cursor, self.epoch = cursor.copy(), np.asarray(state["epoch"], dtype=np.int64).copy()

    def manifest(self) -> dict:
        return {**super().manifest(), "prepared": str(self.directory)}


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def read_index(directory: Path, data: DataSection) -> dict:
    """The index of a prepared directory, checked against the config's data settings (ConfigError otherwise)."""
    redo = f"run `python -m training data prepare --config <this config> --out {directory}` again"
    try:
        index = json.loads((directory / prep.INDEX).read_text())
    except FileNotFoundError:
        raise ConfigError("data.prepared", f"no {prep.INDEX} in {directory}: prepare it first with `python -m "
                                           f"training data prepare --config <this config> --out {directory}`") from None
    except (OSError, ValueError) as e:
        raise ConfigError("data.prepared", f"{directory / prep.INDEX} is unreadable: {e}") from None
    if not isinstance(index, dict) or index.get("kind") != prep.KIND or index.get("format") != prep.FORMAT:
        raise ConfigError("data.prepared", f"{directory} is not a prepared data directory of format {prep.FORMAT}")
    want, have = prep.settings_of(data), index.get("settings", {})
    diffs = [f"{k}: prepared with {have.get(k)!r}, config has {want[k]!r}" for k in prep.SETTINGS
             if have.get(k) != want[k]]
    if diffs:
        raise ConfigError("data.prepared", f"{directory} was prepared from other data settings ("
                                           + "; ".join(diffs) + f"): {redo}")
    return index


def load_prepared(data: DataSection, seq_len: int, batch_size: int, seed: int, token_budget: int, *,
                  vocab_size: int, tokenizer_file: Path | None = None, may_train: bool = True) -> ShardSampler:
    """The ShardSampler of `data.prepared`. The prepared tokenizer is also copied to `tokenizer_file` (the run's
    own copy, beside its checkpoints) by the process that `may_train`."""
    t0 = time.perf_counter()
    directory = Path(data.prepared).absolute()
    index = read_index(directory, data)
    t = index["tokenizer"]
    if t["vocab_size"] > vocab_size:
        raise ConfigError("model.vocab_size", f"{directory} was tokenized with {t['vocab_size']} ids, more than "
                                              f"model.vocab_size ({vocab_size})")
    if t.get("file"):
        path = directory / t["file"]
        tok = BpeTokenizer.load(path)
        if tok.sha256 != t["sha256"]:
            raise ConfigError("data.prepared", f"{path} is not the tokenizer its index names (sha256 {tok.sha256}, "
                                               f"index {t['sha256']})")
        if may_train and tokenizer_file is not None:
            tokenizer_file.parent.mkdir(parents=True, exist_ok=True)
            tok.save(tokenizer_file)
    else:
        tok = ByteTokenizer()
    domains = []
    for e in index["domains"]:
        arrays = {}
        for kind in ("train_shards", "eval_shards"):
            arrays[kind] = []
            for shard in e[kind]:
                path = directory / shard["file"]
                try:
                    ok = _file_sha(path) == shard["sha256"]
                except OSError:
                    ok = False
                if not ok:
                    raise ConfigError("data.prepared", f"{path} is missing or not the shard its index names: "
                                                        f"prepare {directory} again")
                arrays[kind].append(np.load(path, mmap_mode="r"))
        eval_tokens = np.concatenate(arrays["eval_shards"]) if arrays["eval_shards"] else np.zeros(0, np.uint16)
        domains.append(PreparedDomain(e, ShardStream(arrays["train_shards"]), eval_tokens))
    sampler = ShardSampler(domains, data, seq_len, batch_size, seed, token_budget=token_budget, tokenizer=tok)
    sampler.directory = directory
    sampler.load_seconds = time.perf_counter() - t0
    return sampler
