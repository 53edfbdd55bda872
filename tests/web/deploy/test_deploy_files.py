"""deploy/compose.yaml, deploy/k8s/*.yaml and deploy/Dockerfile, checked without a running container engine or a
cluster (neither can run here, and no base image can be pulled): Compose's own config check (Debian's docker-compose,
which .ci/run installs), YAML parse, a small schema of what each must hold, and cross references (services,
selectors, probes, the web server's flags)."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from ..servers import ROOT

sys.path.insert(0, str(ROOT / "deploy"))
from run_local import is_loopback, proxy_flags  # noqa: E402

DEPLOY = ROOT / "deploy"
COMPOSE_KEYS = {"image", "build", "command", "environment", "volumes", "ports", "expose", "depends_on", "deploy",
                "healthcheck", "restart", "user", "stop_signal", "stop_grace_period", "networks"}


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def test_compose_has_every_process_of_the_product_with_known_keys():
    c = _compose()
    services = c["services"]
    assert {"proxy", "push", "relay", "web", "ingest", "celery-worker", "celery-beat", "trainer", "postgres",
            "redis", "migrate"} <= set(services)
    for name, svc in services.items():
        assert set(svc) <= COMPOSE_KEYS, f"{name}: unknown keys {set(svc) - COMPOSE_KEYS}"
        assert "image" in svc or "build" in svc, name
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on undefined {dep}"
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                assert (DEPLOY / src).exists(), f"{name} mounts missing {src}"
            else:
                assert src in c["volumes"], f"{name} mounts undeclared volume {src}"
    assert services["web"]["deploy"]["replicas"] >= 2 and services["ingest"]["deploy"]["replicas"] == 2
    assert "/healthz" in " ".join(services["web"]["healthcheck"]["test"])
    assert services["proxy"]["depends_on"]["web"]["condition"] == "service_healthy"


def test_compose_passes_composes_own_config_check():
    exe = shutil.which("docker-compose")
    assert exe, "Debian's docker-compose is needed here (.ci/run installs it)"
    out = subprocess.run([exe, "-f", str(DEPLOY / "compose.yaml"), "config", "--services"], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == set(_compose()["services"])
    # as Compose reads it: the push tier's replicas, and the file that puts their channels in Redis
    out = subprocess.run([exe, "-f", str(DEPLOY / "compose.yaml"), "config"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    push = yaml.safe_load(out.stdout)["services"]["push"]
    assert push["deploy"]["replicas"] >= 2 and "ports" not in push
    mounts = [v.split(":")[:2] if isinstance(v, str) else [v["source"], v["target"]] for v in push["volumes"]]
    (conf,) = [src for src, target in mounts if target == "/etc/nginx/conf.d/default.conf"]
    assert Path(conf).resolve() == (DEPLOY / "push.conf").resolve()
    assert re.search(r"^\s*nchan_redis_server redis://", Path(conf).read_text(), re.M)
    env = dict(line.split("=", 1) for line in (DEPLOY / ".env").read_text().splitlines()
               if line and not line.startswith("#"))
    assert env["COMPOSE_PROJECT_NAME"] == "observatory"  # volumes observatory_pgdata etc., not deploy_*


def test_compose_builds_the_dockerfile_and_redis_persists():
    c = _compose()
    build = c["services"]["web"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (DEPLOY / "Dockerfile").resolve()
    redis_cmd = " ".join(c["services"]["redis"]["command"])
    assert "--appendonly yes" in redis_cmd and "--appendfsync everysec" in redis_cmd
    assert c["services"]["trainer"]["stop_signal"] == "SIGINT"  # checkpoint before exit
    env = c["services"]["web"]["environment"]
    assert env["DATABASE_URL"].startswith("postgres://") and env["REDIS_URL"] == "redis://redis:6379/0"


def test_the_image_runs_the_web_server_with_make_runs_flags():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", text, re.M)
    assert "pip install -r requirements.txt" in text and "collectstatic" in text and re.search(r"^USER ", text, re.M)
    cmd = re.search(r"^CMD (\[.*?\])\s*$", text.replace("\\\n", ""), re.M | re.S).group(1)
    # deploy/web.py execs run_local's web_command: the same flags by construction (tests/web/deploy runs it)
    assert yaml.safe_load(cmd) == ["python", "deploy/web.py", "--host", "0.0.0.0", "--port", "8000"]
    assert "forwarded-allow-ips" not in text


def test_compose_trusts_proxy_headers_from_its_proxy_alone():
    c = _compose()
    proxy_ip = c["services"]["proxy"]["networks"]["default"]["ipv4_address"]
    assert c["services"]["web"]["environment"]["OBS_TRUSTED_PROXIES"] == proxy_ip
    (net,) = c["networks"]["default"]["ipam"]["config"]
    subnet, handed_out = ipaddress.ip_network(net["subnet"]), ipaddress.ip_network(net["ip_range"])
    assert ipaddress.ip_address(proxy_ip) in subnet and ipaddress.ip_address(proxy_ip) not in handed_out


def test_compose_runs_the_push_tier_as_replicas_sharing_redis_behind_the_proxy():
    """compose's `push`: 2+ nchan replicas running deploy/push.conf (also the cluster's, test_push_replicas.py runs
    it) with their channels in compose's Redis, a database of their own; the producers publish to any replica on a
    port no service publishes; the proxy routes /live/ to the replicas and has no way to their publisher; one relay."""
    s = _compose()["services"]
    push, proxy, env = s["push"], s["proxy"], s["web"]["environment"]
    assert push["deploy"]["replicas"] >= 2 and "ports" not in push
    assert push["image"] == proxy["image"] and push["build"] == proxy["build"]  # deploy/Dockerfile.proxy
    assert "./push.conf:/etc/nginx/conf.d/default.conf:ro" in push["volumes"]
    assert push["depends_on"]["redis"]["condition"] == "service_healthy"
    conf = (DEPLOY / "push.conf").read_text()
    redis = urlparse(env["REDIS_URL"])
    host, db = re.search(r"^\s*nchan_redis_server redis://([\w.-]+:\d+)/(\d+);", conf, re.M).groups()
    assert host == redis.netloc and db != redis.path.strip("/")  # the streams' Redis, not their database
    assert conf.count("nchan_redis_pass nchan_redis;") == 3  # publishers (full, lite) and subscribers: one store
    pub = urlparse(env["OBS_LIVE_PUSH_URL"])
    assert pub.hostname == "push" and f"listen {pub.port};" in conf
    published = [p for svc in s.values() for p in svc.get("ports", [])]
    assert published == ["8080:80"]  # the proxy's alone
    proxy_conf = (DEPLOY / "nginx.conf").read_text()
    upstream = re.search(r"upstream (\w+) \{\s*(?:#[^\n]*\s*)*server push:80\b", proxy_conf).group(1)
    assert re.search(r"location /live/ \{[^}]*proxy_pass http://" + upstream + ";", proxy_conf)
    assert f":{pub.port}" not in proxy_conf and not re.search(r"^\s*nchan_", proxy_conf, re.M)
    assert "push" in proxy["depends_on"]
    assert s["relay"]["command"] == ["python", "manage.py", "relay"] and s["relay"]["deploy"]["replicas"] >= 2


def test_the_proxy_sets_the_forwarded_address_instead_of_appending_to_the_clients():
    conf = (DEPLOY / "nginx.conf").read_text()
    assert re.search(r"^\s*proxy_set_header X-Forwarded-For \$remote_addr;", conf, re.M)
    assert "$proxy_add_x_forwarded_for" not in conf


def test_proxy_headers_are_read_from_the_named_proxies_only_and_from_none_by_default(monkeypatch):
    monkeypatch.delenv("OBS_TRUSTED_PROXIES", raising=False)
    assert proxy_flags() == ["--no-proxy-headers"]  # not uvicorn's default (127.0.0.1, or FORWARDED_ALLOW_IPS)
    monkeypatch.setenv("OBS_TRUSTED_PROXIES", " 172.30.80.200, 10.1.0.0/16,")
    assert proxy_flags() == ["--proxy-headers", "--forwarded-allow-ips", "172.30.80.200/32,10.1.0.0/16"]


@pytest.mark.parametrize("bad", ["*", "nginx", "10.0.0.1/8"])
def test_a_bad_trusted_proxy_stops_make_run_and_the_image_before_anything_starts(bad, tmp_path):
    # Were the value let through, both would stop at once rather than run the product: make run's database and
    # the image's listening address are out of reach.
    env = {**os.environ, "OBS_TRUSTED_PROXIES": bad, "OBS_DATA_DIR": str(tmp_path),
           "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
    env.pop("OBS_HOST", None)
    for script, args in (("run_local.py", []), ("web.py", ["--host", "203.0.113.1"])):
        out = subprocess.run([sys.executable, str(DEPLOY / script), *args], env=env, capture_output=True, text=True)
        assert out.returncode == 2 and f"OBS_TRUSTED_PROXIES: {bad!r} is not" in out.stdout + out.stderr, out


def _k8s_docs() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                doc["_file"] = path.name
                docs.append(doc)
    return docs


def test_every_manifest_has_the_required_fields_and_selectors_match_their_pods():
    docs = _k8s_docs()
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "Ingress", "Job", "Namespace"} <= kinds
    pods = []
    for d in docs:
        where = f"{d['_file']}: {d.get('kind')} {d.get('metadata', {}).get('name')}"
        assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), where
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == "observatory", where
        if d["kind"] in ("Deployment", "StatefulSet", "Job"):
            tmpl = d["spec"]["template"]
            labels = tmpl["metadata"]["labels"]
            if d["kind"] != "Job":
                sel = d["spec"]["selector"]["matchLabels"]
                assert sel.items() <= labels.items(), f"{where}: selector does not match its pods"
            for ctr in tmpl["spec"]["containers"]:
                assert ctr.get("name") and ctr.get("image"), where
                for m in ctr.get("volumeMounts", []):
                    vols = {v["name"] for v in tmpl["spec"].get("volumes", [])}
                    vols |= {v["metadata"]["name"] for v in d["spec"].get("volumeClaimTemplates", [])}
                    assert m["name"] in vols, f"{where}: mount {m['name']} has no volume"
            pods.append(labels)
    for svc in (d for d in docs if d["kind"] == "Service"):
        assert any(svc["spec"]["selector"].items() <= p.items() for p in pods), f"Service {svc['metadata']['name']}"


def test_web_pods_are_probed_on_healthz_and_the_ingress_reaches_the_web_service():
    docs = _k8s_docs()
    web = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "web")
    ctr = web["spec"]["template"]["spec"]["containers"][0]
    for probe in ("readinessProbe", "livenessProbe"):
        assert ctr[probe]["httpGet"]["path"] == "/healthz"
        assert ctr[probe]["httpGet"]["port"] in [p["name"] for p in ctr["ports"]]
    assert web["spec"]["replicas"] >= 2
    ingest = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "ingest")
    assert ingest["spec"]["replicas"] == 2
    ing = next(d for d in docs if d["kind"] == "Ingress")
    paths = {p["path"]: p["backend"]["service"]["name"] for p in ing["spec"]["rules"][0]["http"]["paths"]}
    assert paths["/"] == "web"
    redis = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "redis")
    assert "--appendonly" in redis["spec"]["template"]["spec"]["containers"][0]["command"]


def test_the_push_tier_runs_replicas_sharing_redis_behind_the_ingress_and_one_relay():
    """deploy/k8s/push.yaml (tests/web/deploy/test_push_replicas.py runs its nginx configuration): 2+ nchan replicas
    on the config's Redis, /live/ routed to them, the producers' OBS_LIVE_PUSH_URL on their publisher Service, which
    only this namespace's pods reach, and one relay (a second would publish every frame twice)."""
    docs = _k8s_docs()
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    push, relay = by[("Deployment", "push")], by[("Deployment", "relay")]
    assert push["spec"]["replicas"] >= 2 and relay["spec"]["replicas"] >= 2  # leases: any number
    assert relay["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "manage.py", "relay"]
    ctr = push["spec"]["template"]["spec"]["containers"][0]
    assert ctr["image"] == yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["proxy"]["image"]
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/healthz"
    # its nginx configuration is compose's, deploy/push.conf, made into the ConfigMap the README's command creates
    (vol,) = push["spec"]["template"]["spec"]["volumes"]
    assert vol["configMap"]["name"] == "push-nginx"
    readme = re.sub(r"\\\n\s*", "", (DEPLOY / "k8s" / "README.md").read_text())
    assert re.search(r"create configmap push-nginx --from-file=default\.conf=deploy/push\.conf", readme)
    conf = (DEPLOY / "push.conf").read_text()
    config = by[("ConfigMap", "observatory-config")]["data"]
    redis_host = urlparse(config["REDIS_URL"]).netloc
    assert re.search(rf"nchan_redis_server redis://{re.escape(redis_host)}/\d+;", conf)
    assert conf.count("nchan_redis_pass nchan_redis;") == 3  # publishers (full, lite) and subscribers: one store
    from observatory import contract

    found = re.findall(r'location ~ "\^/(?:pub|live)/runs/\((?:\?<\w+>)?([^)]+)\)', conf)
    found += re.findall(r'location ~ "\^/(?:_live_authorize|live/authorize)/\(([^)]+)\)', conf)  # the check's
    assert len(found) == 5 and {f"^{x}$" for x in found} == {contract.RUN_ID_PATTERN}
    pub = urlparse(config["OBS_LIVE_PUSH_URL"])
    svc = by[("Service", pub.hostname)]
    assert pub.port in [p["port"] for p in svc["spec"]["ports"]] and f"listen {pub.port};" in conf
    assert svc["spec"]["selector"].items() <= push["spec"]["template"]["metadata"]["labels"].items()
    policy = by[("NetworkPolicy", "push-publish")]
    rule = next(r for r in policy["spec"]["ingress"] if {"port": pub.port} in r["ports"])
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "observatory"}}}]
    ing = next(d for d in docs if d["kind"] == "Ingress")
    paths = {p["path"]: p["backend"]["service"]["name"] for p in ing["spec"]["rules"][0]["http"]["paths"]}
    assert paths["/live/"] == "push" and by[("Service", "push")]["spec"]["ports"][0]["port"] == 80
    assert pub.hostname not in paths.values()  # the publisher is never public


def test_the_multihost_recipes_set_what_the_trainer_reads():
    """deploy/multihost: the indexed Job and the shell recipe give every process the coordinator, the process count
    and its own index under the names training/distributed.py reads, and pod 0 is reachable where they point."""
    src = (ROOT / "training" / "distributed.py").read_text()
    names = re.search(r'ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID = "(\w+)", "(\w+)", "(\w+)"', src).groups()
    service, job = list(yaml.safe_load_all((DEPLOY / "multihost" / "hero-job.yaml").read_text()))
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"]
    pod = job["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert set(names) <= set(env)
    assert env[names[1]]["value"] == str(job["spec"]["completions"])
    assert "job-completion-index" in env[names[2]]["valueFrom"]["fieldRef"]["fieldPath"]
    host, port = env[names[0]]["value"].split(":")
    assert host == f"{job['metadata']['name']}-0.{pod['subdomain']}" and pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and int(port) in [p["port"] for p in service["spec"]["ports"]]
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    shell = (DEPLOY / "multihost" / "run-hosts.sh").read_text()
    assert all(f'{n}="$' in shell for n in names)


def test_make_run_refuses_to_serve_debug_pages_beyond_this_machine(tmp_path):
    """make run is the local mode (Django debug pages over plain HTTP): bound to another address it stops at once,
    exit 2, naming the flag and the way out, before starting anything."""
    env = {k: v for k, v in os.environ.items() if k != "OBS_DEBUG"}
    out = subprocess.run([sys.executable, "deploy/run_local.py", "--host", "0.0.0.0", "--port", "1"], cwd=ROOT,
                         env={**env, "OBS_DATA_DIR": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr + out.stdout
    said = out.stdout + out.stderr
    assert "--host 0.0.0.0" in said and "OBS_DEBUG=1" in said and "deploy/" in said
    assert not list(tmp_path.iterdir()), "nothing started, nothing written"
    assert all(map(is_loopback, ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2")))
    assert not any(map(is_loopback, ("0.0.0.0", "192.168.1.4", "::", "example.org")))


def test_the_push_tiers_run_id_pattern_is_the_contracts():
    import run_local

    from observatory import contract

    assert f"^{run_local._RUN_RE}$" == contract.RUN_ID_PATTERN  # nchan's location regexes: a copy, held equal
    conf = (ROOT / "deploy" / "push.conf").read_text()
    found = re.findall(r'location ~ "\^/(?:pub|live)/runs/\((?:\?<\w+>)?([^)]+)\)', conf)
    found += re.findall(r'location ~ "\^/(?:_live_authorize|live/authorize)/\(([^)]+)\)', conf)  # the check's
    assert len(found) == 5 and {f"^{x}$" for x in found} == {contract.RUN_ID_PATTERN}


def test_make_run_renders_the_one_nchan_config_and_nginx_accepts_it(tmp_path):
    """deploy/push.conf's channel rules, rendered for one nginx: every mark replaced, nothing else changed; the proxy
    passes the Host with its port and no nginx version."""
    import push_tier

    if push_tier.push_tier_missing():
        pytest.skip(f"no push tier here ({push_tier.push_tier_missing()}); CI installs it")
    (tmp_path / "nginx").mkdir()
    (tmp_path / "logs").mkdir()
    conf = push_tier.nchan_config(tmp_path, "127.0.0.1", 8100, str(tmp_path / "web.sock"), 8101, 8102)
    source = (DEPLOY / "push.conf").read_text()
    assert "@" not in conf.split("from deploy/push.conf")[1].replace("`@", "")
    for line in source.splitlines():
        if "# @" not in line:
            assert line in conf  # the channel rules are push.conf's own lines
    assert "proxy_set_header Host $http_host;" in conf and "server_tokens off;" in conf
    assert "listen 127.0.0.1:8101;" in conf and "listen 127.0.0.1:8100;" in conf
    # the subscriber check's cache on TCP (a unix socket's full backlog crashed nchan's worker under a crowd)
    assert "listen 127.0.0.1:8102 backlog=4096;" in conf and "server 127.0.0.1:8102;" in conf
    (tmp_path / "nginx.conf").write_text(conf)
    out = subprocess.run(["nginx", "-t", "-c", str(tmp_path / "nginx.conf"), "-p", str(tmp_path / "nginx"), "-e",
                          str(tmp_path / "logs" / "err.log")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with pytest.raises(ValueError, match="unknown mark @nope"):
        push_tier.render_push_conf("listen 1;  # @nope\n", {})


def test_the_deploy_proxy_passes_the_host_with_its_port():
    conf = (DEPLOY / "nginx.conf").read_text()
    assert re.search(r"^\s*proxy_set_header Host \$http_host;", conf, re.M)
    assert not re.search(r"proxy_set_header Host \$host;", conf)
    assert "server_tokens off;" in conf
