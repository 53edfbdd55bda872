"""Training-test fixtures: tiny run configs, the real trainer on a thread or through its CLI, what it published."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from observatory import contract
from tests.tiny import TinyConfigs

ROOT = Path(__file__).resolve().parents[2]


def _fast_in_process_jax() -> None:
    """JAX in this test process: its compiled programs persist in the trainers' cache (var/jax-cache under the
    checkout, git-ignored, made on first use; each program's file is written once, and a torn one read by another
    worker is a warned miss), so a later run, another xdist worker, or a trainer a test starts from the repository
    root reads what one compiled. Its CPU backend compiles at optimisation level 0, as every process of the suite
    does (tests/conftest.py sets XLA_FLAGS for all of them)."""
    import jax

    from training.compile_cache import enable_compilation_cache

    enable_compilation_cache(str(ROOT / "var" / "jax-cache"))
    jax.devices()  # the backend reads XLA_FLAGS once, here


_fast_in_process_jax()


@pytest.fixture
def tiny(tmp_path) -> TinyConfigs:
    return TinyConfigs(tmp_path)


# A trainer that has neither changed phase nor stepped for this long is hung. Not a time limit on the work: a
# compile on two cores under the suite's four workers and other work took minutes (CI, 2026-12-07), so any fixed
# limit on a whole start-up is one a loaded machine can pass.
STALL_S = 600.0


class BackgroundTrainer:
    """The real Trainer, built as the CLI builds it, on a thread of this process (no subprocess start-up)."""

    def __init__(self, cfg, run_id: str, redis_url: str | None, jsonl_path: Path | None = None):
        from training.cli import build_trainer

        self.trainer = build_trainer(cfg, run_id, redis_url=redis_url,
                                     metrics_jsonl=str(jsonl_path) if jsonl_path else None)
        self.rc = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        self.rc = self.trainer.run()

    def _progress(self) -> tuple:
        return self.trainer.progress.phase, self.trainer.state.step

    def _wait(self, done: Callable[[], bool], what: str, max_step: int | None = None) -> None:
        """Until `done()`. Fails when the trainer stops making progress (same phase and step for STALL_S) or,
        given `max_step`, when it steps past it (it should have stopped by then)."""
        seen, since = self._progress(), time.monotonic()
        while not done():
            now = self._progress()
            if now != seen:
                seen, since = now, time.monotonic()
            assert time.monotonic() - since < STALL_S, f"{what}: trainer hung in {seen[0]} at step {seen[1]}"
            assert max_step is None or now[1] <= max_step, f"{what}: trainer went on to step {now[1]}"
            self.thread.join(0.01)

    def wait_step(self, step: int) -> None:
        """Until the loop has dispatched `step`."""
        def done():
            assert self.thread.is_alive() or self.trainer.state.step >= step, f"trainer exited early with {self.rc}"
            return self.trainer.state.step >= step

        self._wait(done, f"waiting for step {step}")

    def join(self, max_step: int | None = None) -> int:
        """Until the run returns; its exit status. `max_step`: fail as soon as it dispatches a step past this."""
        self._wait(lambda: not self.thread.is_alive(), "trainer did not stop", max_step)
        return self.rc

    def stop(self) -> None:
        if self.thread.is_alive():
            self.trainer.request_stop("test teardown")
            self.thread.join(120)  # best effort at teardown (the test's own assertions have run)


@pytest.fixture
def start_trainer():
    """start_trainer(cfg, run_id, redis_url, jsonl_path=None) -> a running BackgroundTrainer, stopped at teardown."""
    started: list[BackgroundTrainer] = []

    def start(cfg, run_id: str, redis_url: str | None, jsonl_path: Path | None = None) -> BackgroundTrainer:
        bg = BackgroundTrainer(cfg, run_id, redis_url, jsonl_path)
        started.append(bg)
        bg.thread.start()
        return bg

    yield start
    for bg in started:
        bg.stop()


class TrainerCli:
    """`python -m training ...` in a subprocess, from the repository root."""

    @staticmethod
    def cmd(config: Path, *args: str) -> list[str]:
        return [sys.executable, "-m", "training", "run", "--config", str(config), *args]

    def run(self, config: Path, *args: str, timeout: float = 900, env=None) -> subprocess.CompletedProcess:
        # `timeout` guards against a hang only: an 8-device mesh run took over 180 s with the suite's four workers
        # and other work on two cores (CI, 2026-12-04)
        return subprocess.run(self.cmd(config, *args), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **(env or {})})

    def popen(self, config: Path, *args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen(self.cmd(config, *args), cwd=ROOT, text=True, **kw)

    @staticmethod
    def control(*args: str, timeout: str = "20") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "training", "control", *args, "--timeout", timeout],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.fixture
def trainer_cli() -> TrainerCli:
    return TrainerCli()


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSONL mirror; a torn last line (killed mid-write) is skipped."""
    out = []
    if Path(path).exists():
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def read_stream(client, run_id: str) -> list[contract.Message]:
    """Every entry of the run's telemetry stream, validated against the contract."""
    return [contract.decode(f, expect_run=run_id) for _, f in client.xrange(contract.telemetry_stream(run_id))]


@pytest.fixture
def jsonl() -> Callable[[Path], list[dict]]:
    return read_jsonl


@pytest.fixture
def stream() -> Callable[..., list[contract.Message]]:
    return read_stream


def wait_until(condition: Callable[[], object], timeout: float, what: str, poll_s: float = 0.01):
    """Poll `condition` until it returns something truthy (returned); the timeout only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(poll_s)
    return value


@pytest.fixture
def until() -> Callable:
    return wait_until


@pytest.fixture
def op(redis_client, run_id, stream, until):
    """An Operator (tests/training/operators.py) of this test's run."""
    from tests.training.operators import Operator

    return Operator(redis_client, run_id, stream, until)
