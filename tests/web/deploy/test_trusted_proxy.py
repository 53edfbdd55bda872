"""Deployments trust their proxy and nothing else (issue 45): the manifests are read as a cluster would.

Kubernetes: OBS_TRUSTED_PROXIES names the ingress controller's own small pool, never anything as wide as a pod network
(or 0.0.0.0/0), and a NetworkPolicy selecting the web pods admits only the ingress controller, this namespace's pods
and Prometheus, each rule with a `from` (a rule without one admits everyone). Compose: the web trusts the proxy's
fixed address alone, publishes no host port, and no other service can be handed that address."""

from __future__ import annotations

import ipaddress

import yaml

from ..servers import ROOT

DEPLOY = ROOT / "deploy"
WIDEST_TRUSTED = 24  # a controller's pool is a handful of addresses; a /16 is a pod network


def _k8s() -> list[dict]:
    return [d for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]


def _trusted(value: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    return [ipaddress.ip_network(x.strip(), strict=False) for x in str(value).split(",") if x.strip()]


def test_kubernetes_trusts_the_ingress_controllers_pool_and_not_the_pod_network():
    config = next(d for d in _k8s() if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "observatory-config")
    nets = _trusted(config["data"]["OBS_TRUSTED_PROXIES"])
    assert nets
    for net in nets:
        assert net.prefixlen >= (WIDEST_TRUSTED if net.version == 4 else 120), f"{net} is wider than a proxy pool"
        assert not net.is_global, net  # a cluster-internal address, not a public one
    readme = (DEPLOY / "k8s" / "README.md").read_text()
    assert all(str(net) in readme for net in nets)  # the pool the README tells you to give the controller


def _matches(selector: dict, labels: dict) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items()


def test_a_network_policy_admits_only_the_ingress_controller_and_internal_pods_to_the_web():
    docs = _k8s()
    web = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "web")
    labels = web["spec"]["template"]["metadata"]["labels"]
    port = web["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    policies = [d for d in docs if d["kind"] == "NetworkPolicy" and _matches(d["spec"]["podSelector"], labels)]
    assert len(policies) == 1, "exactly one NetworkPolicy selects the web pods"
    (policy,) = policies
    assert "Ingress" in policy["spec"]["policyTypes"]
    sources = []
    for rule in policy["spec"]["ingress"]:
        assert rule.get("from"), f"a rule without `from` admits every pod and address: {rule}"
        assert [p["port"] for p in rule["ports"]] == [port]
        for peer in rule["from"]:
            assert "ipBlock" not in peer, f"an address block, not a selector: {peer}"
            ns = peer.get("namespaceSelector")
            assert ns is None or ns.get("matchLabels"), f"every namespace: {peer}"  # {} would select them all
            if ns is not None:
                assert peer.get("podSelector", {}).get("matchLabels"), f"every pod of a namespace: {peer}"
            sources.append((ns or {}).get("matchLabels", {}).get("kubernetes.io/metadata.name", "observatory"))
    assert sources == ["ingress-nginx", "observatory", "monitoring"]
    ingress = next(d for d in docs if d["kind"] == "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"  # the controller the policy names


def test_compose_trusts_its_proxy_alone_and_exposes_the_web_only_to_it():
    c = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = c["services"]
    proxy_ip = services["proxy"]["networks"]["default"]["ipv4_address"]
    for name, svc in services.items():
        trusted = (svc.get("environment") or {}).get("OBS_TRUSTED_PROXIES")
        if trusted is not None:
            assert _trusted(trusted) == [ipaddress.ip_network(proxy_ip)], name
        if name != "proxy":
            addr = (svc.get("networks") or {}).get("default", {}) if isinstance(svc.get("networks"), dict) else {}
            assert (addr or {}).get("ipv4_address") != proxy_ip, f"{name} could take the proxy's address"
    assert "ports" not in services["web"], "the web replicas are reached through the proxy only"
    assert services["web"]["environment"]["OBS_TRUSTED_PROXIES"] == proxy_ip


def test_the_trainers_get_their_runs_key_and_never_the_master():
    """A trainer host may steer its own run only: in compose and in the cluster it is given its run's key
    (OBS_RUN_CONTROL_KEY_FILE) and neither the master's variable nor a volume holding the master."""
    c = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    trainer = c["services"]["trainer"]
    env = trainer["environment"]
    assert env["OBS_CONTROL_KEY_FILE"] == "" and env["OBS_RUN_CONTROL_KEY_FILE"].endswith("/control_key")
    assert not any(v.startswith("secrets:") for v in trainer["volumes"])  # the master's volume
    assert c["services"]["web"]["environment"]["OBS_CONTROL_KEY_FILE"]
    init = " ".join(c["services"]["secrets-init"]["command"])
    assert 'run_control_key(f.read().strip(), "demo")' in init  # the demo trainer's --run-id
    assert '"--run-id", "demo"' in str(trainer["command"]).replace("'", '"')
    sts = next(d for d in _k8s() if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "trainer")
    pod = sts["spec"]["template"]["spec"]
    ctr = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["OBS_CONTROL_KEY_FILE"] == "" and env["OBS_RUN_CONTROL_KEY_FILE"]
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"observatory-run-key-demo"}  # not observatory-secrets, which holds the master
    assert "control_key demo" in (DEPLOY / "k8s" / "README.md").read_text()
