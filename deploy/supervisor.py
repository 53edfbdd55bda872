"""`make run`'s supervisor (deploy/run_local.py): starts the children, stops them in order, and watches them. The
push tier (nginx with nchan, the relay) is restarted when it exits: nothing on the durable path waits on it (ingest
appends to the runs' live logs; the relay publishes them), so its failure costs viewers a reconnect, never the
trainer. Any other child exiting stops the rest (a trainer that finished leaves the web up).

No import from the repository: deploy/run_local.py runs as a script beside it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("OBS_DATA_DIR", ROOT / "var"))

RESTARTED = frozenset({"nginx", "relay"})  # the push tier: restarted, with backoff, when it exits
RESTART_FIRST_S = 0.5  # the first restart's delay; doubled for each exit within STABLE_S of its start, up to
RESTART_MAX_S = 10.0
STABLE_S = 30.0


def log(msg: str) -> None:
    print(f"[observatory] {msg}", flush=True)


def _die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGTERM this child when the supervisor dies, however it dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Supervisor:
    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.specs: dict[str, tuple[list[str], dict[str, str]]] = {}  # name -> (argv, env), for restarts
        self.started: dict[str, float] = {}
        self.delays: dict[str, float] = {}  # name -> its next restart's delay
        self.due: dict[str, float] = {}  # name -> when its restart is due (it exited)
        self.restarts = 0
        self.stopping = False
        self.scratch: list[str] = []  # folders removed once every child has stopped (the web's socket folder)

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        VAR.joinpath("logs").mkdir(parents=True, exist_ok=True)
        # Own session: Ctrl-C reaches only the supervisor, which then stops children in order (a second,
        # direct SIGINT would interrupt the trainer's final checkpoint).
        p = subprocess.Popen(argv, cwd=ROOT, env=env, preexec_fn=_die_with_parent, start_new_session=True)
        self.procs.append((name, p))
        self.specs[name] = (argv, env)
        self.started[name] = time.monotonic()
        log(f"started {name} (pid {p.pid})")
        return p

    def check(self) -> int | None:
        """One look at the children: restart the push tier's, note a finished trainer; the exit status to stop
        with when another child exited, else None."""
        now = time.monotonic()
        for name, p in list(self.procs):
            rc = p.poll()
            if rc is None:
                continue
            self.procs.remove((name, p))
            if name == "trainer" and rc == 0:
                log("the trainer finished; the web stays up (Ctrl-C to stop)")
            elif name in RESTARTED:
                stable = now - self.started.get(name, now) >= STABLE_S
                delay = RESTART_FIRST_S if stable else self.delays.get(name, RESTART_FIRST_S)
                self.delays[name] = min(RESTART_MAX_S, delay * 2)
                self.due[name] = now + delay
                log(f"{name} exited with status {rc}; restarting it in {delay:g} s (the trainer and ingest go on)")
            else:
                log(f"{name} exited with status {rc}; stopping the rest")
                return rc or 1
        for name, at in list(self.due.items()):
            if now >= at:
                del self.due[name]
                self.restarts += 1
                self.start(name, *self.specs[name])
        return None

    def watch(self, stop_requested: list) -> int:
        """Watch until a stop is asked (0) or a child that is not restarted exits (its status); then stop all."""
        while not stop_requested:
            rc = self.check()
            if rc is not None:
                self.stop()
                return rc
            time.sleep(0.2)
        self.stop()
        return 0

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        log("stopping children...")
        # Producer first, so that ingest still stores the trainer's final checkpoint and "stopped" state;
        # then the rest. The trainer gets SIGINT (checkpoint, then exit), the others SIGTERM.
        stage_of = {"trainer": 0, "redis": 2}  # everything else (web, ingest, celery) is stage 1
        for stage in (0, 1, 2):
            group = [(n, p) for n, p in self.procs if stage_of.get(n, 1) == stage]
            for name, p in group:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT if name == "trainer" else signal.SIGTERM)
            for name, p in group:
                try:
                    p.wait(60 if name == "trainer" else 15)
                except subprocess.TimeoutExpired:
                    log(f"{name} did not stop in time: killing")
                    p.kill()
                    p.wait()
            if stage == 0 and group:
                time.sleep(1.0)  # let ingest store the trainer's last messages
        for d in self.scratch:
            shutil.rmtree(d, ignore_errors=True)
        log("all stopped")


if __name__ == "__main__":
    sys.exit("deploy/supervisor.py is imported by deploy/run_local.py (make run)")
