"""The push tier `make run` puts in front of the web server: nginx with nchan, its configuration rendered from
deploy/push.conf (the one nchan configuration; the push replicas of deploy/compose.yaml and deploy/k8s run it as
is), and the check that the front door accepts what browsers send.

No import from the repository: deploy/run_local.py runs as a script beside it.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import resource
import shutil
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NCHAN_MODULE = Path(os.environ.get("OBS_NCHAN_MODULE", "/usr/lib/nginx/modules/ngx_nchan_module.so"))
# A run id as a channel name, in nchan's location regexes: contract.RUN_ID_PATTERN without its anchors (this
# script runs without the repository on its path; tests/web/deploy/test_deploy_files.py holds the two equal).
_RUN_RE = "[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
# A run's channels: run/<id> (every series) and run/<id>/lite (the default dashboard's: webapp/live/relay.py).


def push_tier_missing() -> str | None:
    """Why `make run` cannot start the push tier (nginx with nchan), or None when it can."""
    if os.environ.get("OBS_PUSH_TIER", "auto") == "off":
        return "OBS_PUSH_TIER=off"
    if not shutil.which("nginx"):
        return "no nginx on PATH"
    if not NCHAN_MODULE.exists():
        return f"no nchan module at {NCHAN_MODULE}"
    return None


PUSH_CONF = ROOT / "deploy" / "push.conf"
_MARK = re.compile(r"^(\s*)[^#]*#\s*@([a-z-]+)\b.*$")


def render_push_conf(text: str, marks: dict[str, str | None]) -> str:
    """deploy/push.conf with each line marked `# @<mark>` replaced by marks[<mark>] (indented like it; None drops
    it). The one nchan configuration: make run renders the file the push replicas run as is."""
    out = []
    for line in text.splitlines():
        m = _MARK.match(line)
        if not m:
            out.append(line)
            continue
        if m.group(2) not in marks:
            raise ValueError(f"{PUSH_CONF.name}: unknown mark @{m.group(2)}")
        if marks[m.group(2)] is not None:
            out.extend(m.group(1) + part for part in marks[m.group(2)].splitlines())
    return "\n".join(out) + "\n"


def _listen(host: str, port: int) -> str:
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


def open_file_limit() -> int:
    """The open files nginx's worker may have: its worker_rlimit_nofile, at most the hard limit it inherits (nginx
    cannot raise it past that: setrlimit fails and the worker keeps the soft limit)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)


def viewer_cap(nofile: int) -> int:
    """Viewer sockets one nginx accepts with `nofile` open files: the rest is kept for listeners, logs, the relays'
    publishes, the subscriber check and the pages proxied to the web (make run's hub sockets take two each)."""
    return max(1, nofile - max(256, nofile // 20))


def nchan_config(var: Path, host: str, port: int, web: int | str, pub_port: int, auth_port: int,
                 conn_limit: int | None = None, redis: str | None = None, nofile: int | None = None) -> str:
    """nginx.conf for `make run`'s push tier: deploy/push.conf rendered for one nginx (nchan's websocket
    subscribers at /live/runs/<run>/, its publisher at 127.0.0.1:pub_port for this machine only: OBS_LIVE_PUSH_URL)
    with everything else proxied to the web server (`web`: a unix socket's path, or a port on 127.0.0.1), the
    subscriber check's cache on 127.0.0.1:auth_port (TCP, not a unix socket: push.conf's @auth-listen says why).
    redis (benches): a push replica's, channels in nchan's Redis mode at that URL (the @replica lines kept).
    nofile: the worker's open files (default: open_file_limit()); viewer sockets are capped below it (viewer_cap):
    on a box whose hard limit is 20,000, 20,000 viewers left no descriptor for the relay and nothing was delivered.

    The proxy contract: the web sees the Host the browser sent, port included ($http_host: CSRF's origin check and
    every absolute URL need it), and the client's address in X-Forwarded-For (set, never appended), which it trusts
    from this nginx alone (the web's unix socket sits in a directory only this user can open: webapp.serving)."""
    d = var / "nginx"
    nofile = nofile or open_file_limit()
    temps = "\n".join(f"    {k}_temp_path {d / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    upstream = f"unix:{web}" if isinstance(web, str) else f"127.0.0.1:{web}"
    text = PUSH_CONF.read_text()
    if conn_limit is not None:  # tests: a small per-address limit to reach
        text = re.sub(r"limit_conn live_per_addr \d+;", f"limit_conn live_per_addr {int(conn_limit)};", text)
    if redis is not None:
        text = re.sub(r"#\s*@replica\b.*$", "", text.replace("redis://redis:6379/1", redis), flags=re.M)
    servers = render_push_conf(text, {
        "replica": None,
        "viewer-cap": f"limit_conn live_all {viewer_cap(nofile)};",
        "web-upstream": None,  # make run's own (observatory_web below: the web's unix socket or port)
        "auth-upstream": f"upstream live_authorize {{ server 127.0.0.1:{auth_port}; keepalive 8; }}",
        "auth-listen": f"listen 127.0.0.1:{auth_port} backlog=4096;",
        "auth-cache": f"proxy_cache_path {d / 'live-auth'} levels=1 keys_zone=live_authorize:1m max_size=8m "
                      "inactive=1m;",
        "real-ip": None,  # make run's nginx is the edge: the peer is the client
        "publisher-listen": f"listen 127.0.0.1:{pub_port};",
        "public-listen": f"listen {_listen(host, port)};",
        "public-rest": """location /ws/ {
    proxy_pass http://observatory_web;
    proxy_read_timeout 1h;
    proxy_send_timeout 1h;
    proxy_buffering off;
}
location / {
    proxy_pass http://observatory_web;
    proxy_read_timeout 60s;
}""",
    })
    # nginx started as root runs its workers as `nobody` unless told: they could not open the web's private socket
    user = "user root;\n" if os.geteuid() == 0 else ""
    # Connection slots twice the files: with as many slots as files (20,000) nginx ran out of slots at 18,770 viewers
    # and closed the relays' publisher connections to reuse them (nothing delivered); the files bind, below viewer_cap
    return f"""# Generated by deploy/run_local.py (make run) from deploy/push.conf: overwritten at each start.
load_module {NCHAN_MODULE};
{user}worker_processes 1;
worker_rlimit_nofile {nofile};
daemon off;
pid {d / "nginx.pid"};
error_log {var / "logs" / "nginx-error.log"} warn;
events {{ worker_connections {2 * nofile}; }}
http {{
    access_log off;
    server_tokens off;
{temps}
    nchan_shared_memory_size 128m;
    upstream observatory_web {{ server {upstream}; keepalive 32; }}
    map $http_upgrade $connection_upgrade {{ default upgrade; "" ""; }}
    client_max_body_size 4m;
    client_body_timeout 30s;
    proxy_set_header Host $http_host;
    proxy_set_header X-Forwarded-For $remote_addr;
    proxy_set_header X-Forwarded-Proto $scheme;
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection $connection_upgrade;
    proxy_http_version 1.1;

{servers}}}
"""


def front_door_problem(public_url: str) -> str | None:
    """What a browser on `public_url` would meet at its first form, or None when a form POST with that Origin passes
    Django's CSRF checks (the view may then answer anything but 403). Run once the web answers: a proxy that drops
    the Host's port, or an OBS_PUBLIC_URL that is not the address browsers use, fails here at start, not silently at
    the first log-in."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = public_url.rstrip("/")
    try:
        opener.open(f"{base}/accounts/login/", timeout=10).read()
        token = next((c.value for c in jar if c.name == "csrftoken"), "")
        req = urllib.request.Request(f"{base}/accounts/logout/", data=b"", method="POST", headers={  # no-op
            "Origin": base, "Referer": f"{base}/accounts/login/", "X-CSRFToken": token})
        opener.open(req, timeout=10).read()
    except urllib.error.HTTPError as e:
        if e.code >= 500:
            return f"the web answered {e.code} to a form POST from {base}"
        if e.code == 403:
            page = e.read().decode(errors="replace")
            why = re.search(r"(Origin checking failed|CSRF)[^<]{0,200}", page)
            return (f"a form POST from {base} is refused (403: {why.group(0).strip() if why else 'forbidden'}): the "
                    "proxy must pass the Host with its port, and OBS_PUBLIC_URL name the address browsers use")
    except OSError as e:
        return f"{base} does not answer ({e})"
    return None
