"""Django settings: every knob comes from the environment, read here (and only here: tests/test_architecture.py)
through typed helpers that fail loudly; secrets also as NAME_FILE. The variables: README "Configuration".
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

from observatory.contract import load_control_key
from observatory.streams.nchan import NchanPublisher
from webapp.public import public_url

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str:
    val = os.environ.get(name)
    if val is None:
        if default is None:
            raise ImproperlyConfigured(f"environment variable {name} is required")
        return default
    return val


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None


def env_float(name: str, default: float, lo: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        val = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(val) or val < lo:
        raise ImproperlyConfigured(f"{name}={raw!r} must be a finite number >= {lo:g}")
    return val


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_secret(name: str) -> str | None:
    """NAME, or the contents of the file named by NAME_FILE (Docker/systemd secrets). Both set is an error."""
    direct, path = os.environ.get(name), os.environ.get(f"{name}_FILE")
    if direct and path:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    if path:
        try:
            val = Path(path).read_text().strip()
        except OSError as e:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {e}") from None
        if not val:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} is empty")
        return val
    return direct or None


def dev_secret_key(path: Path) -> str | None:
    """The development secret key `make run` keeps in the data folder, or None where it has made none."""
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def database_from_url(url: str, data_dir: Path) -> dict:
    """DATABASE_URL -> a DATABASES entry. postgres[ql]://user:pass@host:port/name?opt=v or sqlite:///path."""
    u = urlparse(url)
    if u.scheme in ("postgres", "postgresql"):
        name = unquote(u.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} names no database")
        try:
            port = u.port
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} has a bad port") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(u.username or ""),
            "PASSWORD": unquote(u.password or ""),
            "HOST": u.hostname or "",
            "PORT": str(port or ""),
            "OPTIONS": dict(parse_qsl(u.query)),
            **REUSED,
            "TEST": {"NAME": f"test_{name}_{os.getpid()}"},  # parallel test runs must not share a database
        }
    if u.scheme == "sqlite":
        path = u.path[1:] if u.path.startswith("//") else u.path.lstrip("/")  # sqlite:////abs, sqlite:///rel
        if not path:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r} names no file")
        return _sqlite(Path(path) if Path(path).is_absolute() else BASE_DIR / path, data_dir)
    raise ImproperlyConfigured(f"DATABASE_URL scheme {u.scheme!r} not supported (use postgres:// or sqlite:///)")


def _sqlite(path: Path, data_dir: Path) -> dict:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        "OPTIONS": {
            # WAL: the web server reads while ingest writes; IMMEDIATE: writers queue instead of failing.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE", "timeout": 30}, **REUSED,
        # A file (not :memory:) so that test subprocesses (daphne, ingest) can share it; per-pid for parallel runs.
        "TEST": {"NAME": str(data_dir / f"test-observatory-{os.getpid()}.sqlite3")},
    }


# ---------------------------------------------------------------------------------------------- core
TESTING = env_bool("OBS_TESTING", False)
REUSED = {"CONN_MAX_AGE": 0 if TESTING else 60,  # kept by its request thread (webapp.threads); closed in tests: a
          "CONN_HEALTH_CHECKS": True}  # test database is dropped at the end, and no thread may hold it open
DEBUG = env_bool("OBS_DEBUG", False)
DATA_DIR = Path(env_str("OBS_DATA_DIR", str(BASE_DIR / "var")))
if not DATA_DIR.is_absolute():
    DATA_DIR = BASE_DIR / DATA_DIR
DATA_DIR.mkdir(parents=True, exist_ok=True)

# `make run` keeps a development key in OBS_DATA_DIR/secret.key (deploy/run_local.py), so that `manage.py ...` works
# beside it without OBS_DEBUG; only that file, and a deployment (no such file) still refuses to start without a key.
SECRET_KEY = env_secret("DJANGO_SECRET_KEY") or dev_secret_key(DATA_DIR / "secret.key")
if not SECRET_KEY:
    if not (DEBUG or TESTING):
        raise ImproperlyConfigured("DJANGO_SECRET_KEY or DJANGO_SECRET_KEY_FILE must be set unless OBS_DEBUG=1")
    SECRET_KEY = "dev-only-insecure-key-never-use-in-production"

ALLOWED_HOSTS = env_list("OBS_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")


# The address browsers use: CSRF's trusted origin, and every absolute link (og:url, og:image, oEmbed, mail links,
# notifications: webapp.public.absolute). Unset, links follow each request's Host (a proxy must pass it with its
# port: deploy/nginx.conf, deploy/run_local.py) and notifications name http://127.0.0.1:8000.
OBS_PUBLIC_URL_SET = bool(os.environ.get("OBS_PUBLIC_URL", "").strip())
OBS_PUBLIC_URL = public_url(os.environ.get("OBS_PUBLIC_URL", "") or "http://127.0.0.1:8000")
# Set by make run for the web it puts behind its nginx on a unix socket: webapp.proxied.
OBS_PROXY_SOCKET = env_str("OBS_PROXY_SOCKET", "")
if OBS_PUBLIC_URL_SET:
    CSRF_TRUSTED_ORIGINS = [OBS_PUBLIC_URL]
    _public_host = urlparse(OBS_PUBLIC_URL).hostname
    if "*" not in ALLOWED_HOSTS and not any(
            h == _public_host or (h.startswith(".") and _public_host.endswith(h)) for h in ALLOWED_HOSTS):
        ALLOWED_HOSTS.append(f"[{_public_host}]" if ":" in _public_host else _public_host)
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
if urlparse(REDIS_URL).scheme not in ("redis", "rediss", "unix"):
    raise ImproperlyConfigured(f"REDIS_URL {REDIS_URL!r} is not a redis://, rediss:// or unix:// URL")

_db_url = os.environ.get("DATABASE_URL", "").strip()
DATABASES = {"default": database_from_url(_db_url, DATA_DIR) if _db_url
             else _sqlite(DATA_DIR / "observatory.sqlite3", DATA_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "daphne",  # first: its runserver speaks ASGI (WebSockets) in development
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",
    "csp",
    "webapp.accounts",
    "webapp.intake",
    "webapp.runs",
    "webapp.metrics",
    "webapp.transfer",  # imports and exports: W&B, TensorBoard, CSV/JSON/Parquet
    "webapp.anomalies",
    "webapp.experiments",
    "webapp.annotations",
    "webapp.control",
    "webapp.ops",
    "webapp.live",
    "webapp.reports",  # reports and embeds: they read every app above (live's subscription details included)
    "webapp.publicapi",  # exports, the OpenAPI schema and docs, the /api/ envelope
    "webapp.front",  # last: the front page reads every app before it; link previews
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "webapp.publicapi.middleware.ApiMiddleware",  # /api/v1/ paths, API-Version header, one error shape
    "webapp.limits.RequestLimitsMiddleware",  # too many fields -> 400, too big a body -> 413, in every mode
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_ratelimit.middleware.RatelimitMiddleware",  # a refused rate becomes RATELIMIT_VIEW's 429
    "axes.middleware.AxesMiddleware",  # last: it turns a lock-out into its response
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [BASE_DIR / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = ["django.contrib.staticfiles.finders.FileSystemFinder",
                       "django.contrib.staticfiles.finders.AppDirectoriesFinder",
                       "webapp.runs.bundle.BundleFinder"]  # js/dashboard-bundle.js: the dashboard's scripts in one
STATIC_ROOT = Path(env_str("OBS_STATIC_ROOT", str(DATA_DIR / "static")))  # the image collects it at build
SERVE_STATIC = env_bool("OBS_SERVE_STATIC", True)
# Probes and scrapes speak plain HTTP inside the cluster: no redirect to HTTPS for them (webapp.ops).
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
if SERVE_STATIC:  # WhiteNoise: cache headers and compressed variants, no extra server (a proxy may serve them too)
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")
    WHITENOISE_USE_FINDERS = True  # static/ straight from the source tree until collectstatic has run
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # (WhiteNoise warns about a missing one)
# collectstatic (the image runs it) writes content-hashed, gzipped copies and a manifest; pages without debug then
# name the hashed files, which WhiteNoise serves compressed and immutable for a year. A checkout that has not
# collected (or debug) names the source files.
if "collectstatic" in sys.argv or (STATIC_ROOT / "staticfiles.json").exists():
    STORAGES = {"default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
                "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}}

# ---------------------------------------------------------------------------------------------- accounts
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"
AXES_FAILURE_LIMIT = env_int("OBS_LOGIN_FAILURE_LIMIT", 5)  # failed log-ins per (username, address) ...
AXES_COOLOFF_TIME = 0.25  # ... lock it out for 15 minutes
# Failed log-ins per username from all addresses together (many addresses guessing one account) lock it too, at a
# higher limit and not at addresses it logged in from before (webapp.accounts.lockout). Failures while locked out
# are not counted, so a lock ends 15 minutes after it began: holding an account needs that many fresh guesses.
LOGIN_ACCOUNT_FAILURE_LIMIT = env_int("OBS_LOGIN_ACCOUNT_FAILURE_LIMIT", 20)
if not 1 <= AXES_FAILURE_LIMIT <= LOGIN_ACCOUNT_FAILURE_LIMIT:
    raise ImproperlyConfigured(f"OBS_LOGIN_FAILURE_LIMIT={AXES_FAILURE_LIMIT} must be at least 1 and at most "
                               f"OBS_LOGIN_ACCOUNT_FAILURE_LIMIT={LOGIN_ACCOUNT_FAILURE_LIMIT}")
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "username"]
AXES_HANDLER = "webapp.accounts.lockout.AccountLockoutHandler"
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# One client address for the lockout and every rate limit: REMOTE_ADDR, never a header (OBS_TRUSTED_PROXIES).
# django-ratelimit reads it by default (and refuses an empty one); axes would ask django-ipware if installed.
AXES_CLIENT_IP_CALLABLE = "webapp.accounts.client.client_address"
RATELIMIT_VIEW = "webapp.accounts.views.rate_limited"  # 429, not django-ratelimit's default 403
# Rate-limit counters must be shared by every web replica: Redis. Tests count in their own process memory.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"} if TESTING else {
    "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": "obs-cache"}}

# Email: written to files under OBS_EMAIL_DIR (default var/mail) unless an SMTP host is configured.
DEFAULT_FROM_EMAIL = env_str("OBS_EMAIL_FROM", "observatory@localhost")
if os.environ.get("OBS_EMAIL_HOST"):
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST = env_str("OBS_EMAIL_HOST")
    EMAIL_PORT = env_int("OBS_EMAIL_PORT", 587)
    EMAIL_HOST_USER = env_str("OBS_EMAIL_USER", "")
    EMAIL_HOST_PASSWORD = env_secret("OBS_EMAIL_PASSWORD") or ""
    EMAIL_USE_TLS = env_bool("OBS_EMAIL_TLS", True)
else:
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = env_str("OBS_EMAIL_DIR", str(DATA_DIR / "mail"))

# ---------------------------------------------------------------------------------------------- security
# No inline scripts anywhere (every script is a static file); Plotly injects <style> elements, hence the
# style-src exception. WebSockets go to the same origin, which 'self' covers.
CONTENT_SECURITY_POLICY = {"DIRECTIVES": {
    "default-src": ["'self'"], "script-src": ["'self'"], "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:", "blob:"], "font-src": ["'self'", "data:"], "connect-src": ["'self'"],
    "object-src": ["'none'"], "base-uri": ["'self'"], "form-action": ["'self'"], "frame-ancestors": ["'none'"],
}}
X_FRAME_OPTIONS = "DENY"
# The one exception: /embed/ pages (webapp/reports/embed.py) take these as frame-ancestors, without X-Frame-Options.
OBS_EMBED_FRAME_ANCESTORS = env_list("OBS_EMBED_FRAME_ANCESTORS", "*")
if any(s.strip("'") == "none" for s in OBS_EMBED_FRAME_ANCESTORS) and len(OBS_EMBED_FRAME_ANCESTORS) > 1:
    raise ImproperlyConfigured("OBS_EMBED_FRAME_ANCESTORS: 'none' cannot be combined with other sources")
SESSION_COOKIE_HTTPONLY = True
if not (DEBUG or TESTING):  # (the test client speaks plain HTTP; a test runs `check --deploy` on these)
    # Production: HTTPS only. Behind a TLS-terminating proxy set OBS_BEHIND_TLS_PROXY=1 (X-Forwarded-Proto).
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("OBS_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("OBS_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("OBS_HSTS_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("OBS_HSTS_PRELOAD", True)
    if env_bool("OBS_BEHIND_TLS_PROXY", False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# The run's control key: commands from the web are HMAC-signed with it, and the trainer checks the signature.
try:
    OBS_CONTROL_KEY = load_control_key()
except (OSError, ValueError) as e:
    raise ImproperlyConfigured(str(e)) from None

# ---------------------------------------------------------------------------------------------- realtime
# Pub/sub layer: the default RedisChannelLayer saturates near 300-500 group_send/s (BRIEF §4).
def channel_layers(redis_url: str) -> dict:
    """The channel layer on `redis_url`. Pub/sub ignores Redis database numbers, so a database other than 0 names
    its channels with its own prefix: processes on different databases (test sessions, xdist workers) never hear
    each other's groups, as they never see each other's keys."""
    u = urlparse(redis_url)
    db = dict(parse_qsl(u.query)).get("db") or u.path.strip("/") or "0"
    return {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                        "CONFIG": {"hosts": [redis_url], "prefix": "asgi" if db == "0" else f"asgi-db{db}"}}}


CHANNEL_LAYERS = channel_layers(REDIS_URL)

# The public live path on a push engine (nchan; docs/ARCHITECTURE.md "Live path"): the relay (`manage.py relay`) and
# the frame producers POST to OBS_LIVE_PUSH_URL, nchan's internal-only publisher location; dashboards subscribe at
# OBS_LIVE_SUBSCRIBE_PATH (same origin, through the nginx in front). Unset: the hub (webapp.live.hub) carries it all.
OBS_LIVE_PUSH_URL = env_str("OBS_LIVE_PUSH_URL", "").strip() or None
OBS_LIVE_SUBSCRIBE_PATH = env_str("OBS_LIVE_SUBSCRIBE_PATH", "/live/runs/")
if OBS_LIVE_PUSH_URL:
    try:
        NchanPublisher(OBS_LIVE_PUSH_URL)
    except ValueError as e:
        raise ImproperlyConfigured(f"OBS_LIVE_PUSH_URL: {e}") from None
if not (OBS_LIVE_SUBSCRIBE_PATH.startswith("/") and OBS_LIVE_SUBSCRIBE_PATH.endswith("/")):
    raise ImproperlyConfigured(f"OBS_LIVE_SUBSCRIBE_PATH {OBS_LIVE_SUBSCRIBE_PATH!r} must start and end with '/'")
OBS_LIVE_MIN_INTERVAL_MS = env_float("OBS_LIVE_MIN_INTERVAL_MS", 50.0)  # the hub's pace (webapp.live.hub)
OBS_LIVE_FRAME_BUDGET = env_float("OBS_LIVE_FRAME_BUDGET", 12000.0, lo=1.0)
# The lite channel is paced (one message per OBS_LIVE_PACE_MS) while this many viewers watch it (webapp.live.lite)
OBS_LIVE_PACE_VIEWERS, OBS_LIVE_PACE_MS = env_float("OBS_LIVE_PACE_VIEWERS", 2000), env_float("OBS_LIVE_PACE_MS", 333)

# ---------------------------------------------------------------------------------------------- celery
CELERY_BROKER_URL = REDIS_URL
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
CELERY_BEAT_SCHEDULE = {"check-heartbeats": {"task": "runs.check_heartbeats", "schedule": 10.0}}

# ---------------------------------------------------------------------------------------------- observatory
OBS_LOST_AFTER_S = 300  # a run silent this long after its heartbeat expired is "lost" rather than "stale"
OBS_ANOMALY_WATCH_S = 86_400  # ingest's stall/heartbeat timer watches runs that changed within this window
OBS_OPERATOR_RECHECK_S = 5  # the operator socket re-reads its user's role this often: a demoted operator is closed
# GET /metrics: operators (session) or `Authorization: Bearer <this>` (Prometheus' scrape); nobody else.
OBS_METRICS_TOKEN = env_secret("OBS_METRICS_TOKEN")
# A request's headers (webapp.serving) and its body (webapp.limits.BodyLimits) must arrive within these, or the
# connection is closed (408): a client declaring a large Content-Length and sending little holds nothing for long.
OBS_HEADER_TIMEOUT_S = env_int("OBS_HEADER_TIMEOUT_S", 10)
OBS_BODY_TIMEOUT_S = env_int("OBS_BODY_TIMEOUT_S", 30)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    "loggers": {
        "observatory": {"level": env_str("OBS_LOG_LEVEL", "INFO"), "handlers": ["stderr"], "propagate": False},
        "django": {"level": "INFO" if DEBUG else "WARNING"},
    },
}
if env_str("OBS_LOG_FORMAT", "plain") == "json":  # one JSON object per line (webapp.ops.logs), for log shippers
    LOGGING["formatters"]["plain"] = {"()": "webapp.ops.logs.JsonFormatter"}
