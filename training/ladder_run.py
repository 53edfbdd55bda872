"""`python -m training ladder`: run a ladder's rungs one after another, then fit and pre-register the forecast.

Each rung is a normal `python -m training run` in a subprocess (its own run id, published like any run, so it
shows on the dashboard), its output in <dir>/<run id>.log and its records mirrored to <dir>/<run id>.jsonl. The
state file <dir>/state.json records every finished rung (final loss, tokens, run id). Resumable: a ladder that
is killed or interrupted continues, when run again, with the rung it was on, whose trainer resumes from its own
checkpoint. A trainer dies with its ladder (PR_SET_PDEATHSIG: SIGTERM, so it checkpoints first); the rerun waits
for the run's lock before starting it again. A finished ladder with a registration that verifies is not refitted
unless asked (--refit): a registration is meant to be made once. With --with-target, the target run follows
(its own config, the same progress line) and its final loss, read as a rung's, is held to the forecast:
<dir>/target.json and a closing line with the error and whether it fell inside the band.

Exit: 0 registered, 1 a rung or the fit failed, 2 a bad ladder config (or a rung's config error), 130 interrupted.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from observatory.scaling import registration as reg_lib
from training import ladder as lad
from training.errors import ConfigError

log = logging.getLogger("training.ladder")
POLL_S = 0.5


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _wait_for_lock(ck_root: Path, run_id: str, timeout: float = 300.0) -> None:
    """Until no process holds the run's lock (a trainer of a killed ladder still saving its last checkpoint)."""
    path = ck_root / f"{run_id}.lock"
    if not path.exists():
        return
    deadline, told = time.monotonic() + timeout, False
    with open(path, "a+") as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                return
            except BlockingIOError:
                if not told:
                    log.info("waiting for the previous trainer of %s to checkpoint and exit", run_id)
                    told = True
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {run_id} is still locked after {timeout:g} s ({path})")
                time.sleep(0.2)


class Progress:
    """One line across the rungs: share of the ladder's compute done, the rung and its step, the ETA.

    ETA = start-up per rung still to start (measured: launch to first step, mean over this session's rungs)
    + compute left × seconds per FLOP while stepping (measured over this session's steps). Tiny rungs are mostly
    start-up (import, data, compile), so a compute-only ETA would be far off."""

    def __init__(self, ladder: lad.Ladder, stages: list[lad.Rung] | None = None):
        self.ladder, self.stages = ladder, stages or ladder.rungs  # the rungs, then the target with --with-target
        self.total = sum(r.C for r in self.stages)
        self.tty, self.last_print = sys.stderr.isatty(), 0.0
        self.startups: list[float] = []
        self.step_s = self.step_c = 0.0  # seconds and FLOPs of finished stepping (this session)
        self.launch = self.first_t = 0.0
        self.first_step: int | None = None

    def start(self) -> None:
        self.launch, self.first_step = time.monotonic(), None

    def show(self, i: int, rung: lad.Rung, step: int, final: bool = False) -> None:
        now = time.monotonic()
        if self.first_step is None and step > 0:
            self.first_step, self.first_t = step, now
            self.startups.append(now - self.launch)
        stepping_c = 0.0 if self.first_step is None else rung.C * (step - self.first_step) / rung.steps
        stepping_s = 0.0 if self.first_step is None else now - self.first_t
        done = sum(r.C for r in self.stages[:i]) + rung.C * min(1.0, step / rung.steps)
        frac = done / self.total
        eta = "?"
        if self.startups and self.step_c + stepping_c > 0:
            to_start = len(self.stages) - i - (1 if self.first_step is not None else 0)
            per_flop = (self.step_s + stepping_s) / (self.step_c + stepping_c)
            eta = _dur(to_start * sum(self.startups) / len(self.startups) + (self.total - done) * per_flop)
        if final:
            self.step_s, self.step_c = self.step_s + stepping_s, self.step_c + stepping_c
        bar = "#" * round(24 * frac) + "-" * (24 - round(24 * frac))
        line = (f"ladder {self.ladder.name} [{bar}] {frac:4.0%} of compute  rung {i + 1}/{len(self.stages)} "
                f"{rung.name} step {step}/{rung.steps}  ETA {eta}")
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
            sys.stderr.flush()
        elif final or now - self.last_print >= 15:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
            self.last_print = now


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _last_step(path: Path, pos: int, step: int) -> tuple[int, int]:
    """Read the JSONL mirror from byte `pos`: (new position, newest metrics step seen)."""
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        return pos, step
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if line.startswith(b'{"kind":"metrics"'):
            try:
                step = int(line.split(b'"step":', 1)[1].split(b",", 1)[0])
            except (IndexError, ValueError):
                pass
    return pos + end, step


class Runner:
    def __init__(self, ladder: lad.Ladder, trainer_args: list[str], with_target: bool = False):
        self.ladder, self.trainer_args, self.with_target = ladder, trainer_args, with_target
        self.child: subprocess.Popen | None = None
        self.interrupted: str | None = None

    def _signal(self, signum, frame) -> None:
        self.interrupted = signal.Signals(signum).name
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)  # checkpoint at the next step boundary, then exit

    def run_rung(self, i: int, rung: lad.Rung, progress: Progress, config: Path | None = None) -> int:
        ladder = self.ladder
        config = config or ladder.base  # the target runs its own config, without overrides
        cfg = lad.load(config, rung.overrides)
        _wait_for_lock(Path(cfg.checkpoint.dir), rung.run_id)
        cmd = [sys.executable, "-m", "training", "run", "--config", str(config), "--run-id", rung.run_id,
               "--metrics-jsonl", str(ladder.jsonl(rung)), *self.trainer_args]
        for k, v in rung.overrides.items():
            cmd += ["--set", f"{k}={_toml(v)}"]
        jsonl, pos, step = ladder.jsonl(rung), 0, 0
        if jsonl.exists():
            pos = jsonl.stat().st_size  # a resumed rung: its step comes from the new lines
        with open(ladder.log(rung), "a") as out:
            out.write(f"\n$ {' '.join(cmd)}\n")
            out.flush()
            progress.start()
            self.child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            while self.child.poll() is None:
                try:
                    self.child.wait(POLL_S)
                except subprocess.TimeoutExpired:
                    pass
                pos, step = _last_step(jsonl, pos, step)
                progress.show(i, rung, step)
        rc, self.child = self.child.returncode, None
        progress.show(i, rung, _last_step(jsonl, pos, step)[1], final=True)
        return rc

    def run(self, refit: bool = False) -> int:
        ladder = self.ladder
        state = lad.load_state(ladder)
        target = lad.target_rung(ladder) if self.with_target else None
        record = None
        if not refit and ladder.registration.exists() and all(r.run_id in state["rungs"] for r in ladder.rungs):
            try:
                record = reg_lib.from_json(ladder.registration.read_text())
                log.info("ladder %s: finished; registration %s (sha256 %s) kept (--refit makes a new one)",
                         ladder.name, ladder.registration, record["sha256"])
                if target is None:
                    return 0
            except ValueError as e:
                log.warning("ladder %s: %s does not verify (%s): registering again", ladder.name,
                            ladder.registration, e)
        stages = ladder.rungs + ([target] if target else [])
        for r in stages:
            ratio = "" if r is stages[0] else f" ({r.C / prev:.2f}x)"
            log.info("%-6s %-12s N=%-10.4g D=%-10.4g C=%.3g%s steps=%d%s", "target" if r is target else "rung",
                     r.name, r.N, r.D, r.C, ratio, r.steps, "  done" if r.run_id in state["rungs"] else "")
            prev = r.C
        ladder.dir.mkdir(parents=True, exist_ok=True)
        old = {s: signal.signal(s, self._signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            progress = Progress(ladder, stages)
            if record is None:
                rc = self._rungs(state, progress)
                if rc is not None:
                    return rc
                record = self._register(state)
                if record is None:
                    return 1
            return 0 if target is None else self._target(target, record, progress)
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _rungs(self, state: dict, progress: Progress) -> int | None:
        """Train the rungs not yet done; an exit status when the ladder must stop, else None."""
        ladder = self.ladder
        for i, rung in enumerate(ladder.rungs):
            if rung.run_id in state["rungs"]:
                continue
            if self.interrupted:
                log.info("ladder %s: interrupted (%s); run the same command to continue", ladder.name,
                         self.interrupted)
                return 130
            rc = self.run_rung(i, rung, progress)
            done = self._finished(rung) if rc == 0 else None
            if self.interrupted and done is None:
                log.info("ladder %s: interrupted (%s) in rung %s; run the same command to continue",
                         ladder.name, self.interrupted, rung.name)
                return 130
            if rc != 0 or done is None:
                log.error("ladder %s: rung %s %s; see %s", ladder.name, rung.name,
                          f"exited {rc}" if rc else "stopped before its token budget", ladder.log(rung))
                return 2 if rc == 2 else 1
            state["rungs"][rung.run_id] = done
            lad.save_state(ladder, state)
            log.info("rung %s done: loss %.4f (%s), %d tokens", rung.name, done["loss"], done["source"],
                     done["tokens"])
        return None

    def _register(self, state: dict) -> dict | None:
        ladder = self.ladder
        try:
            record = lad.register(ladder, state)
        except ValueError as e:
            log.error("ladder %s: fit failed: %s", ladder.name, e)
            return None
        lad.write_outputs(ladder, state, record)
        fc = record["forecast"]
        h = fc["hero"]
        band = "" if h["low"] is None else f" [{h['low']:.4f}, {h['high']:.4f}]"
        log.info("law %s (held-out error %s): target %s N=%.4g D=%.4g -> final loss %.4f%s", fc["law"],
                 "n/a" if fc["holdout_error"] is None else f"{fc['holdout_error']:.2%}", record["target"]["run_id"],
                 h["N"], h["D"], h["loss"], band)
        log.info("registered %s sha256 %s%s", ladder.registration, record["sha256"], "" if self.with_target else
                 f"\nstart the target: python -m training run --config {ladder.target} (its [experiment] forecast "
                 f"= {ladder.registration}), or run the ladder with --with-target")
        return record

    def _target(self, target: lad.Rung, record: dict, progress: Progress) -> int:
        """--with-target: train the target (resuming it if it was interrupted) and hold it to the forecast."""
        ladder = self.ladder
        if self.interrupted:
            log.info("ladder %s: interrupted (%s) before the target", ladder.name, self.interrupted)
            return 130
        rc = self.run_rung(len(ladder.rungs), target, progress, config=ladder.target)
        done = self._finished(target) if rc == 0 else None
        if done is None:
            if self.interrupted:
                log.info("ladder %s: interrupted (%s) in the target; run the same command to continue",
                         ladder.name, self.interrupted)
                return 130
            log.error("ladder %s: target %s %s; see %s", ladder.name, target.run_id,
                      f"exited {rc}" if rc else "stopped before its token budget", ladder.log(target))
            return 2 if rc == 2 else 1
        out = lad.held_to_forecast(record, done)
        lad.write_json(ladder.dir / "target.json", out)
        log.info("target %s: final loss %.4f (%s); forecast %.4f%s: error %.2f%%, %s", target.run_id, out["actual"],
                 done["source"], out["forecast"]["loss"], "" if out["forecast"]["low"] is None else
                 f" [{out['forecast']['low']:.4f}, {out['forecast']['high']:.4f}]", 100 * out["error"],
                 "inside the band" if out["inside_band"] else "OUTSIDE the band")
        return 0

    def _finished(self, rung: lad.Rung) -> dict | None:
        """The rung's record for the state file, or None when it stopped before its token budget."""
        try:
            out = lad.final_loss(self.ladder.jsonl(rung))
        except ValueError:
            return None
        if not out["tokens"] >= rung.D:
            return None
        return {**out, "run_id": rung.run_id, "N": rung.N, "C": rung.C / rung.D * out["tokens"],
                "digest": lad.rung_digest(rung), "finished_at": time.time()}


def _toml(v) -> str:
    return json.dumps(v)  # strings, numbers, booleans and lists of them read back the same as TOML


def main(config: str, trainer_args: list[str], refit: bool = False, with_target: bool = False) -> int:
    try:
        ladder = lad.load_ladder(config)
        return Runner(ladder, trainer_args, with_target=with_target).run(refit=refit)
    except ConfigError as e:
        log.error(e.line())
        return 2
