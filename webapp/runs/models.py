"""A training run as the web knows it: identity, lifecycle state, liveness, and its event log."""

from __future__ import annotations

import datetime as dt
import math

from django.db import models
from django.utils import timezone

from observatory import contract
from webapp.intake.models import RunClaim
from webapp.runs.redact import one_line_reason, redact

STATE_CHOICES = [(s, s) for s in ("unknown", *contract.STATES)]
ENDED_STATES = ("stopped", "failed")
IMPORTED_SOURCES = ("wandb", "tensorboard")  # Run.source of runs written by an importer, not a live producer


class Health(models.TextChoices):
    ALIVE = "alive"  # heartbeat key present (or a heartbeat within its TTL)
    STALE = "stale"  # heartbeat expired recently: hung, or the trainer just died
    LOST = "lost"  # silent for longer than OBS_LOST_AFTER_S
    ENDED = "ended"  # stopped or failed on purpose; no heartbeat expected
    UNKNOWN = "unknown"  # never sent a heartbeat


def from_unix(t: float | None) -> dt.datetime | None:
    if t is None or not isinstance(t, (int, float)) or not math.isfinite(t):
        return None
    try:
        return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def json_clean(obj):
    """JSON columns reject NaN/Infinity on PostgreSQL and SQLite: keep them as the strings JavaScript prints."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "NaN" if math.isnan(obj) else ("Infinity" if obj > 0 else "-Infinity")
    if isinstance(obj, dict):
        return {str(k): json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    return obj


class RunQuerySet(models.QuerySet):
    def for_list(self):
        return self.order_by("-updated_at")

    def for_ingest(self, run_id: str) -> "Run":
        """The run a telemetry batch belongs to, created on its first message and then claimed for the trainer
        unless it has an owner already (an HTTP publisher's run, an import: they claim before they write)."""
        run = self.filter(pk=run_id).first()
        if run is None:
            run = self.create(id=run_id, name=run_id)
            RunClaim.for_trainer(run_id)
        return run

    def watched(self):
        """Runs whose liveness matters: not ended on purpose, and not already marked ended."""
        return self.exclude(state__in=ENDED_STATES).exclude(source__in=IMPORTED_SOURCES)

    def refresh_health(self, client, now: dt.datetime, lost_after_s: float) -> list["Run"]:
        """Recompute health for watched runs from their heartbeat keys (one pipelined EXISTS each); save and
        return the runs whose health changed. Ended runs are marked ended once."""
        changed = []
        for run in self.filter(state__in=ENDED_STATES).exclude(health=Health.ENDED):
            run.health = Health.ENDED
            changed.append(run)
        runs = list(self.watched())
        if runs:
            pipe = client.pipeline(transaction=False)
            for run in runs:
                pipe.exists(contract.heartbeat_key(run.id))
            for run, alive in zip(runs, pipe.execute()):
                health = run.health_at(now, bool(alive), lost_after_s)
                if health != run.health:
                    run.health = health
                    changed.append(run)
        saved = []
        for run in changed:
            # only if ingest has not moved the run on meanwhile (a heartbeat or state arriving right now wins)
            if Run.objects.filter(pk=run.pk, state=run.state, last_heartbeat_at=run.last_heartbeat_at).update(
                    health=run.health, updated_at=now):
                run.updated_at = now
                saved.append(run)
        return saved


class Run(models.Model):
    id = models.CharField(primary_key=True, max_length=64)  # the trainer's run id (contract.RUN_ID_RE)
    name = models.CharField(max_length=200, blank=True)
    config = models.JSONField(default=dict, blank=True)
    manifest = models.JSONField(default=dict, blank=True)
    # a run's closing values beside its series ({"best_loss": 0.19, ...}: W&B's run.summary, kept by its import)
    summary_values = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default="unknown")
    state_detail = models.TextField(blank=True)
    phase = models.CharField(max_length=16, blank=True)  # from the latest heartbeat
    health = models.CharField(max_length=8, choices=Health.choices, default=Health.UNKNOWN)
    last_step = models.BigIntegerField(null=True, blank=True)
    heartbeat = models.JSONField(default=dict, blank=True)  # the latest heartbeat's data (tokens, eta_s, ...)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(max_length=16, default="stream")  # "stream" (live) or one of IMPORTED_SOURCES
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = RunQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["-updated_at"], name="run_updated"),  # serves: the run list, newest first
            models.Index(fields=["state"], name="run_state"),  # serves: check_heartbeats' watched() filter
        ]

    def __str__(self):
        return self.name or self.id

    def summary(self) -> dict:
        """What lists and the live badge show."""
        return {
            "id": self.id,
            "name": self.name or self.id,
            "state": self.state,
            "phase": self.phase,
            "health": self.health,
            "last_step": self.last_step,
            "started_at": _iso(self.started_at),
            "updated_at": _iso(self.updated_at),
            "last_heartbeat_at": _iso(self.last_heartbeat_at),
            "source": self.source,
            # what the run header and the live run list show: tokens of budget, rate, ETA (latest heartbeat)
            "progress": {k: (self.heartbeat or {}).get(k)
                         for k in ("tokens", "token_budget", "eta_s", "steps_per_s")},
        }

    def detail(self, full: bool = False) -> dict:
        """The run's record. Public (full=False): host paths redacted, a failure cut to its one-line reason."""
        last_event = self.events.order_by("-id").values_list("id", flat=True).first()
        out = {**self.summary(), "state_detail": self.state_detail, "heartbeat": self.heartbeat,
               "config": self.config, "summary": self.summary_values, "manifest": self.manifest,
               "last_event_id": last_event or 0, "heartbeat_ttl_s": contract.HEARTBEAT_TTL_S}
        if full:
            return out
        return {**redact(out), "state_detail": one_line_reason(self.state_detail)}

    def health_at(self, now: dt.datetime, key_alive: bool, lost_after_s: float) -> str:
        """Liveness from the heartbeat key (set by the trainer with a TTL) and the last heartbeat ingested."""
        if self.state in ENDED_STATES:
            return Health.ENDED
        if key_alive:
            return Health.ALIVE
        if self.last_heartbeat_at is None:
            return Health.UNKNOWN if self.health == Health.UNKNOWN else Health.STALE
        age = (now - self.last_heartbeat_at).total_seconds()
        if age <= contract.HEARTBEAT_TTL_S:
            return Health.ALIVE
        return Health.STALE if age <= lost_after_s else Health.LOST

    # ---------------------------------------------------------------------------------- lifecycle (ingest)
    # One method per telemetry kind; they change the instance only, the caller saves once per batch.
    def apply_info(self, data: dict, source: str) -> None:
        """A `run` message: the trainer (re)started, or an importer describes the run."""
        self.name = data["name"][:200]
        self.config = json_clean(data["config"])
        self.started_at = from_unix(data.get("started_at")) or from_unix(data["t"]) or self.started_at
        self.source = source

    def apply_manifest(self, manifest: dict) -> None:
        self.manifest = json_clean(manifest)

    def apply_heartbeat(self, data: dict) -> None:
        self.phase = data["phase"]
        self.heartbeat = json_clean({k: v for k, v in data.items() if k != "t"})
        self.last_heartbeat_at = from_unix(data["t"]) or timezone.now()
        if self.state not in ENDED_STATES:
            self.health = Health.ALIVE
        self.reached(data["step"])

    def apply_state(self, state: str, detail: str) -> None:
        self.state, self.state_detail = state, str(detail)[:10_000]
        if state in ENDED_STATES:
            self.health = Health.ENDED
        elif self.health == Health.ENDED:  # restarted after it had ended
            self.health = Health.ALIVE

    def reached(self, step: int) -> None:
        self.last_step = step if self.last_step is None else max(self.last_step, step)

    def rewound(self, to_step: int) -> None:
        if self.last_step is not None:
            self.last_step = min(self.last_step, to_step)

    def record_event(self, entry_id: str, kind: str, name, step, t, payload) -> "RunEvent":
        return RunEvent.objects.create(run=self, entry_id=entry_id, kind=kind, name=str(name)[:200], step=step,
                                       payload=json_clean(payload), t=from_unix(t))


def _iso(t):
    return t.isoformat() if t else None


class RunEventQuerySet(models.QuerySet):
    def applied(self, run_id: str, entry_ids) -> set[str]:
        """Which of these stream entry ids already became events (a replay after a crash before XACK)."""
        entry_ids = [e for e in entry_ids if e]
        if not entry_ids:
            return set()
        return set(self.filter(run_id=run_id, entry_id__in=entry_ids).values_list("entry_id", flat=True))


class RunEvent(models.Model):
    """Things that happened to a run, in arrival order: trainer events, state changes, rewinds."""

    KIND_EVENT, KIND_STATE, KIND_REWIND = "event", "state", "rewind"
    KINDS = [(k, k) for k in (KIND_EVENT, KIND_STATE, KIND_REWIND)]

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    entry_id = models.CharField(max_length=40, blank=True)  # telemetry stream entry id: replays are skipped
    kind = models.CharField(max_length=8, choices=KINDS)
    name = models.CharField(max_length=200)
    step = models.BigIntegerField(null=True)
    payload = models.JSONField(default=dict, blank=True)
    t = models.DateTimeField(null=True)  # when the trainer says it happened
    created_at = models.DateTimeField(default=timezone.now)

    objects = RunEventQuerySet.as_manager()

    class Meta:
        indexes = [
            # serves: a run's events after a given id (dashboard load, resume replay), newest last
            models.Index(fields=["run", "id"], name="runevent_run_id"),
        ]
        constraints = [
            # serves: ingest's "was this stream entry already applied?" lookup (and enforces it)
            models.UniqueConstraint(fields=["run", "entry_id"], condition=~models.Q(entry_id=""),
                                    name="runevent_run_entry"),
        ]

    def as_dict(self, full: bool = False) -> dict:
        payload = self.payload if full else redact(self.payload)
        return {"id": self.id, "kind": self.kind, "name": self.name, "step": self.step, "payload": payload,
                "t": _iso(self.t)}

