"""The text-like token stream of bench/moe.py's drop table (data, not a bench): packed documents with topics,
Zipfian tokens and bursty repeats, as router inputs. A fixed seed makes the same batches every run."""

from __future__ import annotations

import numpy as np


class TextLikeStream:
    """Packed documents with topics, Zipfian tokens and bursty repeats; yields router inputs per sequence."""

    def __init__(self, d_model=64, vocab=8192, topics=64, seed=0):
        self.rng = np.random.default_rng(seed)
        r = self.rng
        self.vocab, self.topics = vocab, topics
        zipf = 1.0 / np.arange(1, vocab + 1) ** 1.1
        self.p_global = zipf / zipf.sum()
        self.topic_perm = np.stack([r.permutation(vocab) for _ in range(topics)])
        self.emb = r.normal(size=(vocab, d_model)).astype(np.float32)
        self.topic_vec = r.normal(size=(topics, d_model)).astype(np.float32)

    def _doc(self, n: int, topic: int) -> np.ndarray:
        r = self.rng
        from_topic = r.random(n) < 0.5
        toks = np.where(from_topic, self.topic_perm[topic][r.choice(self.vocab, n, p=self.p_global)],
                        r.choice(self.vocab, n, p=self.p_global))
        # Bursts: a third of the tokens repeat one of the previous 32.
        rep = np.nonzero(r.random(n) < 0.33)[0]
        for i in rep[rep > 0]:
            toks[i] = toks[r.integers(max(0, i - 32), i)]
        return toks

    def sequence(self, length: int) -> np.ndarray:
        """Router inputs [length, d]: documents packed back to back (lognormal lengths, median ~700 tokens)."""
        parts, n = [], 0
        while n < length:
            doc_len = int(min(self.rng.lognormal(np.log(700), 1.0), 4 * length)) + 16
            topic = int(self.rng.integers(self.topics))
            toks = self._doc(doc_len, topic)
            parts.append(self.emb[toks] + 1.0 * self.topic_vec[topic])
            n += doc_len
        x = np.concatenate(parts)
        start = int(self.rng.integers(0, len(x) - length + 1))
        return x[start:start + length]

    def batch(self, tokens: int, seq_len: int) -> np.ndarray:
        return np.concatenate([self.sequence(seq_len) for _ in range(tokens // seq_len)])[None]
