"""Many processes, one run: jax.distributed from config or environment, and step-boundary decisions all obey.

Every process runs the same command line. Process 0 alone publishes telemetry, reads operator commands and
holds the run lock; at each step boundary it decides (commands to apply, whether a checkpoint is due) and every
process adopts its decision, so all of them take the same branch and enter the same collectives (the step, the
checkpoint write) at the same step. A stop asked of any process (SIGTERM) stops all of them at that boundary.
With one process nothing is exchanged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Mapping

import numpy as np

from observatory.contract import Command
from training.config import DistributedSection
from training.errors import ConfigError

log = logging.getLogger(__name__)

ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID = "OBS_COORDINATOR", "OBS_NUM_PROCESSES", "OBS_PROCESS_ID"


def settings(cfg: DistributedSection, env: Mapping[str, str] = os.environ) -> tuple[str, int, int] | None:
    """(coordinator, num_processes, process_id) from the config, else the environment; None: one process."""
    def env_int(name: str, default: int) -> int:
        raw = env.get(name, "").strip()
        try:
            return int(raw) if raw else default
        except ValueError:
            raise ConfigError(name, f"must be an integer, got {raw!r}") from None

    coordinator = cfg.coordinator or env.get(ENV_COORDINATOR, "").strip()
    n = cfg.num_processes or env_int(ENV_NUM_PROCESSES, 1)
    pid = cfg.process_id if cfg.process_id >= 0 else env_int(ENV_PROCESS_ID, -1)
    if n <= 1 and not coordinator:
        return None
    if not coordinator:
        raise ConfigError("distributed.coordinator", f"{n} processes need a coordinator (host:port of process 0; "
                                                     f"or set {ENV_COORDINATOR})")
    if n < 1 or not 0 <= pid < n:
        raise ConfigError("distributed.process_id", f"must be in [0, {n}) for {n} processes, got {pid} "
                                                    f"(or set {ENV_PROCESS_ID})")
    return coordinator, n, pid


def initialize(cfg: DistributedSection, env: Mapping[str, str] = os.environ) -> None:
    """Join the job before anything touches a device (no-op for one process)."""
    s = settings(cfg, env)
    if s is None:
        return
    import jax

    coordinator, n, pid = s
    log.info("joining %d-process job as process %d (coordinator %s)", n, pid, coordinator)
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=pid,
                               initialization_timeout=cfg.timeout_s)


def process_index() -> int:
    import jax

    return jax.process_index()


def is_leader() -> bool:
    return process_index() == 0


@dataclasses.dataclass
class Decision:
    """What every process does at one step boundary."""
    commands: list[Command]
    checkpoint_due: bool
    stop_reason: str | None
    written: bool = True  # every process's async checkpoint write has finished (reporting it is collective)


def _allgather_bytes(payload: bytes) -> list[bytes]:
    from jax.experimental import multihost_utils as mh

    sizes = np.asarray(mh.process_allgather(np.int32(len(payload)))).reshape(-1)
    buf = np.zeros(int(sizes.max()), np.uint8)
    buf[: len(payload)] = np.frombuffer(payload, np.uint8)
    rows = np.asarray(mh.process_allgather(buf)).reshape(len(sizes), -1)
    return [rows[i, : sizes[i]].tobytes() for i in range(len(sizes))]


def agree(commands: list[Command], checkpoint_due: bool, stop_reason: str | None, written: bool = True) -> Decision:
    """Process 0's commands and checkpoint decision, the first stop any process asked for, and whether every
    process's async checkpoint write has finished, on every process."""
    import jax

    if jax.process_count() == 1:
        return Decision(commands, checkpoint_due, stop_reason, written)
    mine = {"stop": stop_reason, "written": written}
    if jax.process_index() == 0:
        mine.update(commands=[dataclasses.asdict(c) for c in commands], due=checkpoint_due)
    parts = [json.loads(b) for b in _allgather_bytes(json.dumps(mine).encode())]
    lead = parts[0]
    stop = next((p["stop"] for p in parts if p["stop"]), None)
    return Decision([Command(**c) for c in lead["commands"]], bool(lead["due"]), stop,
                    all(p["written"] for p in parts))


def barrier(name: str) -> None:
    """Every process reaches this point before any goes on (no-op for one process)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils as mh

        mh.sync_global_devices(name)


class Followers:
    """The command channel of processes other than 0: they apply what process 0 read; acks are process 0's."""

    def applied(self, cmd: Command, detail: str, step: int) -> None:
        pass

    def rejected(self, cmd: Command, reason: str, step: int) -> None:
        pass

    def repeated(self, cmd: Command, rec: dict, step: int) -> None:
        pass
