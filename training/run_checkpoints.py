"""A Trainer's checkpoints: what one holds besides the device state (sampler, schedule, run state, data hashes),
restoring one, refusing to resume on changed data, and writing one again when commands changed the run since."""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np

from training import checkpoint as ckpt_lib
from training.errors import CheckpointError, ConfigError, TrainingFailed

log = logging.getLogger("training.train")  # the trainer's log, as before the split

KEEP_OLD = "nothing was overwritten; fix the config, or start over with --fresh (old checkpoints are moved aside, " \
           "not deleted)"


def _np_tree(d: dict) -> dict:
    """numpy scalars to 0-d arrays: orbax restores arrays into a template, not numpy scalar types."""
    return {k: (_np_tree(v) if isinstance(v, dict) else np.asarray(v)) for k, v in d.items()}


class RunCheckpoints:
    """Trainer's checkpoint methods (a mixin: they use the Trainer's cfg, state, sampler, schedule, checkpointer)."""

    def _check_data(self, saved: dict) -> None:
        """Refuse to resume on text that changed since the checkpoint: the stream would not be the one trained on."""
        changed = [f"{d}: checkpoint {h}, now {self.data_hashes[d]}" for d, h in saved.items()
                   if d in self.data_hashes and self.data_hashes[d] != h]
        if changed and not self.cfg.data.allow_changed_data:  # a config error: exit 2, like a bad key
            raise ConfigError("data.allow_changed_data",
                              "the data of domain(s) " + ", ".join(d for d, h in saved.items() if d in self.data_hashes
                                                                   and self.data_hashes[d] != h)
                              + " changed since the checkpoint (sha256 " + "; ".join(changed) + "); resuming would "
                              "train on a different stream. Restore the data, or set data.allow_changed_data=true "
                              f"to continue anyway -- {KEEP_OLD}")
        if changed:
            log.warning("[%s] data changed since the checkpoint, continuing (allow_changed_data): %s", self.run_id,
                        "; ".join(changed))

    def _host_signature(self) -> str:
        """What a checkpoint holds besides the arrays of a step (sampler, schedule, run state): commands change it
        between steps."""
        blob = json.dumps(ckpt_lib.to_json([self.sampler.state_dict(), self.schedule.state_dict(),
                                            self.state.meta(), self.sampler.tokens_seen]), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _ckpt_tree(self) -> dict:
        return {"train": self.train_state, "sampler": _np_tree(self.sampler.state_dict()),
                "schedule": _np_tree(self.schedule.state_dict())}

    def restore(self, step: int) -> None:
        """Load checkpoint `step` into device state, sampler, schedule and run state; nothing changes on failure."""
        store = self.checkpointer.store
        try:
            tree, meta = store.restore(step, ckpt_lib.abstract(self._ckpt_tree()), self.cfg.fingerprint())
        except CheckpointError as e:
            raise TrainingFailed(f"{e} -- {KEEP_OLD}") from None
        self.train_state = tree["train"]
        self.sampler.load_state_dict(tree["sampler"])
        self.schedule.load_state_dict(tree["schedule"])
        self.state.restore(meta)
        self._saved_host = {step: self._host_signature()}
        self.progress.token_budget = int(self.sampler.token_budget)
        self.progress.stepped(self.state.step, self.sampler.tokens_seen)
        log.info("[%s] restored checkpoint step %d from %s", self.run_id, step, store.directory)

    def save_checkpoint(self, why: str, wait: bool = False, replace: bool = True) -> dict:
        """Checkpoint the run at this step. One already there is written again if commands changed the run since
        (unless `replace` is False: a rollback may be about to restore that very checkpoint)."""
        s, store = self.state, self.checkpointer.store
        signature = self._host_signature()
        if s.step in store.steps():
            if not replace or self._saved_host.get(s.step) == signature:
                return {"step": s.step, "skipped": "already saved at this step"}
            # commands changed the run at this step since its checkpoint (an LR multiplier, skipped batches, the
            # command memory): that checkpoint no longer describes the run, so it is written again
            self.checkpointer.poll(block=True)
            store.delete(s.step)
        self.phase("checkpointing", why)
        meta = {"run_id": self.run_id, "tokens": self.sampler.tokens_seen, "fingerprint": self.cfg.fingerprint(),
                "config": self.cfg.to_dict(), "data_hashes": self.data_hashes, "started_at": self.started_at,
                **s.meta()}
        info = self.checkpointer.save(s.step, self._ckpt_tree(), meta, why, wait)
        self._saved_host[s.step] = signature
        self.phase("paused" if s.paused else "training")
        self.interrupted()
        return info
