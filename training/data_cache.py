"""A cache of the trained BPE tokenizer and the encoded domains under var/, so a warm start skips reading and encoding.

Entries are keyed by everything that determines them: the data settings, every source file's path, size and mtime
(the pinned packages' files at their versions, the interpreter's library, user corpora), the code that reads and
encodes, the library versions, and the tokenizer (its sha256, or the vocabulary size it is trained to). Each entry
is one file written to a temporary name and renamed into place, so concurrent starts never see half a file; an
unreadable or inconsistent entry is a miss and is written again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import uuid
from pathlib import Path

import numpy as np

from training import sources
from training.config import DataSection
from training.sources import Domain
from training.tokenizer import BpeTokenizer

FORMAT = 1
log = logging.getLogger(__name__)
_CODE = [Path(sources.__file__), Path(sources.__file__).with_name("tokenizer.py"), Path(__file__)]


def _stat_lines(paths) -> list[str]:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append(f"{p}\0{st.st_size}\0{st.st_mtime_ns}")
        except OSError:
            out.append(f"{p}\0missing")
    return out


def sources_key(data: DataSection) -> str:
    """The identity of the domains' text as this config would read it (without reading it)."""
    from training.prepare import settings_of  # the settings a prepared directory is checked against, too

    parts: dict = {"format": FORMAT, "settings": settings_of(data), "python": sys.version,
                   "numpy": np.__version__, "code": [hashlib.sha256(p.read_bytes()).hexdigest() for p in _CODE]}
    if any(d != "python_stdlib" for d in data.builtin_domains):
        files = []
        for dist in sources._pinned_dists():  # ConfigError on an unpinned version, as reading would raise
            files.append(f"{dist.metadata['Name']}=={dist.version}")
            files.extend(_stat_lines(str(f.locate()) for f in dist.files or ()))
        parts["packages"] = hashlib.sha256("\n".join(files).encode()).hexdigest()
    if "python_stdlib" in data.builtin_domains:
        root, files = sources._stdlib_files()
        parts["stdlib"] = hashlib.sha256("\n".join([root, *_stat_lines(files)]).encode()).hexdigest()
    for name, directory in sorted(data.corpora.items()):
        root = Path(directory).absolute()
        files = sorted(str(p) for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
        parts[f"corpus:{name}"] = hashlib.sha256("\n".join([str(root), *_stat_lines(files)]).encode()).hexdigest()
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _write_atomic(path: Path, write) -> None:
    """Write to a temporary name, then rename; a cache that cannot be written (full disk, read-only var/) only
    costs the next start its time."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("data cache: could not write %s: %s", path, e)
    finally:
        _drop(tmp)


def _drop(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


class DataCache:
    """The entries of one data config in `directory`. `encoded` and `tokenizer_trained` count the misses."""

    def __init__(self, directory: str | Path, data: DataSection):
        self.directory, self.data = Path(directory).absolute(), data
        self.key = sources_key(data)

    def _tokenizer_path(self, vocab_size: int) -> Path:
        import tokenizers

        return self.directory / f"tokenizer-{self.key}-v{vocab_size}-tk{tokenizers.__version__}.json"

    def _domains_path(self, tokenizer_sha: str) -> Path:
        return self.directory / f"domains-{self.key}-{tokenizer_sha}.npz"

    def get_tokenizer(self, vocab_size: int) -> BpeTokenizer | None:
        """The BPE trained earlier on this text at this vocabulary size (training it again gives the same)."""
        path = self._tokenizer_path(vocab_size)
        try:
            entry = json.loads(path.read_text())
            from tokenizers import Tokenizer

            tok = BpeTokenizer(Tokenizer.from_str(entry["tokenizer"]))
            if entry["key"] != self.key or tok.sha256 != entry["sha256"]:
                raise ValueError("inconsistent entry")
            return tok
        except FileNotFoundError:
            return None
        except Exception:  # truncated, corrupted or foreign: rebuilt by the caller
            _drop(path)
            return None

    def put_tokenizer(self, vocab_size: int, tok: BpeTokenizer) -> None:
        blob = json.dumps({"key": self.key, "sha256": tok.sha256, "tokenizer": tok.json}).encode()
        _write_atomic(self._tokenizer_path(vocab_size), lambda f: f.write(blob))

    def get_domains(self, tokenizer_sha: str) -> list[Domain] | None:
        path = self._domains_path(tokenizer_sha)
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(bytes(z["meta"]).decode())
                if meta["key"] != self.key or meta["tokenizer_sha256"] != tokenizer_sha or \
                        [d["name"] for d in meta["domains"]] != self.data.domain_names:
                    raise ValueError("inconsistent entry")
                return [Domain(d["name"], z[f"train{i}"], z[f"eval{i}"], d["documents"], d["sources"], d["builtin"],
                               d["skipped"], d["text_sha256"]) for i, d in enumerate(meta["domains"])]
        except FileNotFoundError:
            return None
        except Exception:  # a truncated zip fails its CRC or directory check: rebuilt by the caller
            _drop(path)
            return None

    def put_domains(self, tokenizer_sha: str, domains: list[Domain]) -> None:
        meta = {"key": self.key, "tokenizer_sha256": tokenizer_sha,
                "domains": [{"name": d.name, "documents": d.documents, "sources": d.sources, "builtin": d.builtin,
                             "skipped": d.skipped, "text_sha256": d.text_sha256} for d in domains]}
        arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}
        for i, d in enumerate(domains):
            arrays[f"train{i}"], arrays[f"eval{i}"] = d.tokens, d.eval_tokens
        _write_atomic(self._domains_path(tokenizer_sha), lambda f: np.savez(f, **arrays))
