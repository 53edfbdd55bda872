"""A `wandb`-compatible shim: an unchanged wandb-style script streams to the Observatory instead.

    import observatory.client.wandb_compat as wandb

    run = wandb.init(project="lm", name="baseline", config={"lr": 3e-4})
    for step in range(1000):
        wandb.log({"train/loss": loss})          # or wandb.log({...}, step=step), commit=False to accumulate
    wandb.finish()

The transport is `observatory.client.init`'s (OBS_URL + OBS_TOKEN for the site, else REDIS_URL). Steps follow
wandb's rules: without `step` each `log` commits and advances; `commit=False` accumulates into the same step; an
explicit `step` accumulates until a later step arrives (or `commit=True`, or `finish`); a step below the current
one is ignored. Values that are not numbers (text, images, tables, histograms) are skipped and counted in
`run.stats()["skipped"]`. `mirror=True` also logs to the real wandb when it is importable.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import observatory.client as obs
from observatory.client.run import jsonable, number

logger = logging.getLogger(__name__)

__all__ = ["Config", "Run", "init", "log", "finish", "config", "run", "summary", "login", "watch", "define_metric",
           "save", "Image", "Histogram", "Table", "Video", "Audio", "Html"]


class Config(dict):
    """wandb.config: a dict with attribute access; changes after `init` are published to the site."""

    def __init__(self, data: Mapping[str, Any] | None = None, on_change=None):
        super().__init__(dict(data or {}))
        object.__setattr__(self, "_on_change", on_change)

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed({key: value})

    def update(self, d: Mapping[str, Any] | None = None, allow_val_change: bool | None = None, **kwargs) -> None:
        changes = {**dict(d or {}), **kwargs}
        super().update(changes)
        self._changed(changes)

    def setdefaults(self, d: Mapping[str, Any]) -> None:
        self.update({k: v for k, v in d.items() if k not in self})

    def as_dict(self) -> dict:
        return dict(self)

    def _changed(self, changes: dict) -> None:
        if self._on_change is not None and changes:
            self._on_change(changes)


class Run:
    """What `wandb.init` returns: `log`, `finish`, `config`, `summary`, `id`, `name`, `project`."""

    def __init__(self, client_run: obs.Run, project: str | None, mirror: Any = None):
        self.client = client_run
        self.id = client_run.id
        self.name = client_run.name
        self.project = project
        self.summary: dict = {}
        self.config = Config(client_run.config, on_change=self._config_changed)
        self._mirror = mirror
        self._step = 0  # wandb's current step: where the next commit lands
        self._pending: dict = {}

    @property
    def step(self) -> int:
        return self._step

    @property
    def url(self) -> str | None:
        return self.client.dashboard_url

    def log(self, data: Mapping[str, Any], step: int | None = None, commit: bool | None = None) -> None:
        if self._mirror is not None:
            self._mirror.log(_no_media(data), step=step, commit=commit)
        if step is not None:
            step = int(step)
            if step < self._step:
                logger.warning("wandb_compat: step %d is below the current step %d; its data is ignored (as wandb "
                            "does)", step, self._step)
                return
            if step > self._step:
                self._commit()
                self._step = step
        self._pending.update(data)
        if commit if commit is not None else step is None:
            self._commit()

    def finish(self, exit_code: int | None = None, quiet: bool | None = None) -> None:
        self._commit()
        if self._mirror is not None:
            self._mirror.finish(exit_code=exit_code)
        failed = bool(exit_code)
        self.client.finish(failed=failed, detail=f"exit code {exit_code}" if failed else "")
        _forget(self)

    def stats(self) -> dict:
        return self.client.stats()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._commit()
        if self._mirror is not None:
            self._mirror.finish(exit_code=1 if exc_type else 0)
        self.client.__exit__(exc_type, exc, tb)
        _forget(self)
        return False

    def _commit(self) -> None:
        if self._pending:
            self.client.log(self._pending, step=self._step)
            self.summary.update({k: v for k, v in self._pending.items() if number(v) is not None})
            self._pending = {}
            self._step += 1

    def _config_changed(self, changes: dict) -> None:
        self.client.update_config(changes)
        if self._mirror is not None:
            self._mirror.config.update(changes, allow_val_change=True)


# -------------------------------------------------------------------------------------------- module level
run: Run | None = None
config: Config = Config()
summary: dict = {}


def init(project: str | None = None, name: str | None = None, config: Mapping[str, Any] | None = None,  # noqa: F811
         id: str | None = None, *, mirror: bool = False, url: str | None = None, token: str | None = None,
         **wandb_kwargs) -> Run:
    """wandb.init: `project`, `name`, `config`, `id` are used; entity, tags, notes, mode, ... are accepted and
    ignored (passed on to the real wandb when mirroring). `url`/`token` as in `observatory.client.init`."""
    global run
    if run is not None:
        run.finish()
    real = _real_wandb_run(project, name, config, id, wandb_kwargs) if mirror else None
    client_run = obs.init(name=name or project, config=_config_dict(config), run_id=id, url=url, token=token)
    run = Run(client_run, project, mirror=real)
    _expose(run)
    return run


def log(data: Mapping[str, Any], step: int | None = None, commit: bool | None = None,
        sync: bool | None = None) -> None:
    if run is None:
        raise RuntimeError("call wandb.init() before wandb.log()")
    run.log(data, step=step, commit=commit)


def finish(exit_code: int | None = None, quiet: bool | None = None) -> None:
    if run is not None:
        run.finish(exit_code=exit_code)


def login(*args, **kwargs) -> bool:
    return True


def watch(*args, **kwargs) -> None:
    """Gradient and parameter histograms are not streamed; log norms as numbers instead."""


def define_metric(*args, **kwargs) -> None:
    pass


def save(*args, **kwargs) -> None:
    pass


class _Media:
    """Stand-in for wandb's media types: accepted by `log`, skipped (the Observatory plots numbers)."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


class Image(_Media):
    pass


class Histogram(_Media):
    pass


class Table(_Media):
    pass


class Video(_Media):
    pass


class Audio(_Media):
    pass


class Html(_Media):
    pass


def _config_dict(cfg: Any) -> dict:
    return jsonable(cfg) if cfg is not None else {}


def _no_media(data: Mapping[str, Any]) -> dict:
    return {k: v for k, v in data.items() if not isinstance(v, _Media)}


def _expose(r: Run | None) -> None:
    global config, summary
    config = r.config if r is not None else Config()
    summary = r.summary if r is not None else {}


def _forget(r: Run) -> None:
    global run
    if run is r:
        run = None
        _expose(None)


def _real_wandb_run(project, name, cfg, run_id, kwargs):
    try:
        import wandb as real
    except ImportError:
        logger.warning("wandb_compat: mirror=True but wandb is not installed; streaming to the Observatory only")
        return None
    return real.init(project=project, name=name, config=_config_dict(cfg), id=run_id, **kwargs)
