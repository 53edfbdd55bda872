"""The data mixture: which domain each row comes from, by stage, drawn deterministically from the token streams.

Each batch is a pure function of (seed, batch index, mixture weights), so save/restore and skip are exact. The
stage (pretrain 80%, midtrain 20% of the token budget by default) follows the tokens actually trained on.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from observatory import contract
from training.config import DataSection
from training.errors import ConfigError
from training.sources import Domain, collect_domains, tokenize_domains
from training.tokenizer import BpeTokenizer, ByteTokenizer

# Stage presets by name; a domain a preset does not name (a user corpus) gets an even share.
PRESETS = {"pretrain": {"python_source": 0.45, "python_stdlib": 0.45, "docstrings": 0.15, "licenses": 0.2,
                        "docs_text": 0.2},
           "midtrain": {"python_source": 0.25, "python_stdlib": 0.25, "docstrings": 0.35, "licenses": 0.05,
                        "docs_text": 0.35}}


def stage_weights(data: DataSection, domain_names: Sequence[str]) -> list[dict[str, float]]:
    """Per stage: the configured mixture, else the preset of the stage's name, else equal weights."""
    share = 1.0 / max(1, len(domain_names))
    out = []
    for stage in data.stages:
        preset = PRESETS.get(stage)
        default = {d: preset.get(d, share) for d in domain_names} if preset else dict.fromkeys(domain_names, 1.0)
        out.append(data.mixture.get(stage) or default)
    return out


def _weights_vector(weights: Mapping[str, float], domain_names: Sequence[str], key: str) -> np.ndarray:
    if not isinstance(weights, Mapping):
        raise ConfigError(key, "must be a table of domain -> weight")
    for name in weights:
        if name not in domain_names:
            raise ConfigError(f"{key}.{name}", f"unknown domain (known: {', '.join(domain_names)})")
    try:
        checked = contract.check_mixture(dict(weights))
    except contract.MixtureError as e:
        raise ConfigError(f"{key}.{e.domain}" if e.domain is not None else key, str(e)) from None
    vec = np.array([checked.get(d, 0.0) for d in domain_names], dtype=np.float64)
    return vec / vec.sum()


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

    def __init__(self, domains: Sequence[Domain], data: DataSection, seq_len: int, batch_size: int, seed: int, *,
                 token_budget: int, tokenizer=None):
        self.domains = list(domains)
        self.tokenizer = tokenizer or ByteTokenizer()
        self.domain_names = [d.name for d in self.domains]
        for d in self.domains:
            if d.tokens.size < seq_len + 2:
                raise ConfigError(f"data.domains.{d.name}", f"{d.tokens.size} tokens < seq_len + 2 ({seq_len + 2})")
        self.seq_len, self.batch_size, self.seed = seq_len, batch_size, int(seed)
        self.stage_names = list(data.stages)
        self.stage_fractions = list(data.stage_fractions)
        self._stage_weights = np.stack([_weights_vector(w, self.domain_names, f"data.mixture.{s}")
                                        for s, w in zip(data.stages, stage_weights(data, self.domain_names))])
        self._window = np.arange(seq_len + 1, dtype=np.int64)
        self._init_streams()
        self.batch_index = 0
        self.tokens_seen = 0
        self.set_token_budget(token_budget)
        self.domain_tokens = np.zeros(len(self.domains), dtype=np.int64)
        self._override = np.zeros_like(self._stage_weights)  # set-mixture weights per stage
        self._has_override = np.zeros(len(self.stage_names), dtype=np.int32)
        self.load_seconds: float | None = None  # set by build_sampler
        self.cache_info: dict | None = None  # set by build_sampler: what training.data_cache spared

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

    def _init_streams(self) -> None:
        """Where rows come from: here every domain's tokens in memory, one uniform random window per row."""
        self._all = np.concatenate([d.tokens for d in self.domains])
        self._base = np.cumsum([0] + [d.tokens.size for d in self.domains[:-1]]).astype(np.int64)
        self._windows = np.array([d.tokens.size - self.seq_len for d in self.domains], dtype=np.int64)

    def _draw_domains(self, index: int, w: np.ndarray) -> tuple[np.ndarray, np.random.Generator]:
        """Batch `index`'s row domains under weights `w`, and the RNG (drawn on) that chose them."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, index])))
        # searchsorted on the cumulative weights + random(): stable across numpy versions, unlike choice().
        cum = np.cumsum(w)
        ids = np.minimum(np.searchsorted(cum, rng.random(self.batch_size) * cum[-1], side="right"), len(w) - 1)
        while np.any(w[ids] == 0):  # a float edge landing on a zero-weight domain: redraw those rows
            bad = w[ids] == 0
            ids[bad] = np.minimum(np.searchsorted(cum, rng.random(int(bad.sum())) * cum[-1], side="right"),
                                  len(w) - 1)
        return ids, rng

    def _rows(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """[batch, seq_len + 1] int32 token windows, row i from domain ids[i]."""
        starts = self._base[ids] + (rng.random(self.batch_size) * self._windows[ids]).astype(np.int64)
        return self._all[starts[:, None] + self._window].astype(np.int32)

    def next_batch(self) -> Batch:
        stage, w = self.stage, self._current_weights()
        ids, rng = self._draw_domains(self.batch_index, w)
        batch = Batch(self._rows(ids, rng), ids.astype(np.int32), stage, self.batch_index)
        self.batch_index += 1
        self.tokens_seen += self.tokens_per_batch
        np.add.at(self.domain_tokens, ids, self.seq_len)
        return batch

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
        return [int(round(x)) for x in np.cumsum(self.stage_fractions) * self.token_budget]

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
                                      f"this config has {len(self.stage_names)} x {len(self.domains)}")
        self.seed = int(state["seed"])
        self.batch_index = int(state["batch_index"])
        self.tokens_seen = int(state["tokens_seen"])
        self.token_budget = int(state["token_budget"])
        self.domain_tokens = np.asarray(state["domain_tokens"], dtype=np.int64).copy()
        self._override = ov.copy()
        self._has_override = np.asarray(state["has_override"], dtype=np.int32).copy()

    # -- reporting
    def metrics(self) -> dict[str, float]:
        out = {contract.mixture_weight(d): w for d, w in self.weights().items()}
        out[contract.M_MIX_STAGE] = float(self.stage)
        out.update({contract.tokens_seen(d): float(n) for d, n in zip(self.domain_names, self.domain_tokens)})
        return out

    def eval_batches(self, batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Per domain, a fixed [batch, seq_len + 1] batch of evenly spaced held-out windows (no randomness)."""
        b, out = batch_size or self.batch_size, {}
        for d in self.domains:
            src = d.eval_tokens if d.eval_tokens.size >= self.seq_len + 1 else d.tokens  # tiny domain: reuse
            starts = np.linspace(0, src.size - self.seq_len - 1, b).astype(np.int64)
            out[d.name] = src[starts[:, None] + self._window].astype(np.int32)
        return out

    def manifest(self) -> dict:
        ends = self.stage_ends()
        return {"tokenizer": self.tokenizer.describe(), "seq_len": self.seq_len,
                "batch_size": self.batch_size, "seed": self.seed, "token_budget": self.token_budget,
                "load_seconds": self.load_seconds, **({"data_cache": self.cache_info} if self.cache_info else {}),
                "domains": [d.describe() for d in self.domains],
                "stages": [{"name": name, "fraction": self.stage_fractions[i], "start_tokens": ([0] + ends)[i],
                            "end_tokens": ends[i],
                            "weights": dict(zip(self.domain_names, self._stage_weights[i].tolist()))}
                           for i, name in enumerate(self.stage_names)]}


def build_sampler(cfg: DataSection, seq_len: int, batch_size: int, seed: int, token_budget: int, *,
                  vocab_size: int = 256, tokenizer_file: Path | None = None, may_train: bool = True,
                  cache_dir: str | Path | None = None) -> MixtureSampler:
    """Load and tokenize the domains and build the sampler; `manifest()["load_seconds"]` says how long it took.
    (With `data.prepared` the trainer calls training.shards.load_prepared instead.)

    BPE: the run's tokenizer is `tokenizer_file` when it exists (a resume), else trained here on the domains'
    training parts (when `may_train`) and saved there. With `cache_dir` (training.data_cache) a tokenizer trained
    earlier on the same text and the domains encoded earlier with the same tokenizer are read from there;
    `manifest()["data_cache"]` says what was computed."""
    from training.data_cache import DataCache

    t0 = time.perf_counter()
    cache = DataCache(cache_dir, cfg) if cache_dir else None
    info = {"dir": str(cache.directory), "key": cache.key} if cache else {}
    info.update(tokenizer="byte", tokenizer_trained=False, encoded=True)
    raw, tok = None, None
    if cfg.tokenizer == "byte":
        tok = ByteTokenizer()
    elif tokenizer_file is not None and tokenizer_file.exists():
        tok, info["tokenizer"] = _run_tokenizer(tokenizer_file, vocab_size), "the run's"
    elif not may_train:
        raise ConfigError("data.tokenizer", f"no tokenizer at {tokenizer_file}: process 0 trains and saves it")
    elif cache and (tok := cache.get_tokenizer(vocab_size)) is not None:
        info["tokenizer"] = "cached"
        _save(tok, tokenizer_file)
    domains = cache.get_domains(tok.sha256) if cache and tok is not None else None
    if domains is None:
        raw = collect_domains(cfg)
        if tok is None:
            tok = BpeTokenizer.train([d for r in raw for d in r.train_docs(cfg.eval_fraction)], vocab_size)
            info.update(tokenizer="trained", tokenizer_trained=True)
            _save(tok, tokenizer_file)
            if cache:
                cache.put_tokenizer(vocab_size, tok)
        domains = tokenize_domains(raw, tok, cfg.eval_fraction)
        if cache:
            cache.put_domains(tok.sha256, domains)
    else:
        info["encoded"] = False
    sampler = MixtureSampler(domains, cfg, seq_len, batch_size, seed, token_budget=token_budget, tokenizer=tok)
    sampler.load_seconds = time.perf_counter() - t0
    sampler.cache_info = info
    return sampler


def _run_tokenizer(path: Path, vocab_size: int) -> BpeTokenizer:
    tok = BpeTokenizer.load(path)
    if tok.vocab_size > vocab_size:
        raise ConfigError("model.vocab_size", f"the run's tokenizer {path} has {tok.vocab_size} ids, more than "
                                              f"model.vocab_size ({vocab_size})")
    return tok


def _save(tok: BpeTokenizer, path: Path | None) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tok.save(path)
