"""The layering in docs/ARCHITECTURE.md, enforced by import and template analysis.

- the core (`observatory/`) imports no framework; its pure part (contract, series math) imports no I/O library;
  only the seams named in IO_SEAMS may talk to Redis or the network;
- the worker and the web never import each other (they meet only through Redis and `observatory.contract`);
- no import cycles between training modules, between observatory modules, or between web apps;
- web apps import only apps before them in WEB_CHAIN (the one-way chain of docs/ARCHITECTURE.md);
- templates name (url, static, include, extends) only their own app's or earlier apps' URLs, static files and
  templates; a later app extends an earlier page through webapp/runs/extensions.py (rules: STATIC_OWNERS below).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FRAMEWORKS = {"django", "channels", "celery", "daphne", "jax", "jaxlib", "flax", "optax", "orbax"}
FORBIDDEN = {
    "observatory": FRAMEWORKS | {"webapp", "training"},
    "training": {"django", "channels", "celery", "daphne", "webapp"},
    "webapp": {"jax", "jaxlib", "flax", "optax", "orbax", "training"},
}
# Libraries that do I/O (network, database, processes, external services). The pure core imports none.
IO_LIBS = {"redis", "wandb", "requests", "httpx", "urllib3", "aiohttp", "websockets", "socket", "ssl",
           "sqlite3", "psycopg", "psycopg2", "subprocess", "psutil", "http", "urllib.request", "smtplib",
           "asyncio", "threading", "multiprocessing"}
# The named places of observatory/ that may do I/O: the Redis stream seam (and, later, the client library).
IO_SEAMS = ("observatory/streams/", "observatory/client")

# The web chain: an app may import only apps listed before it. A new app must be added here (and to the docs).
WEB_CHAIN = ("accounts", "intake", "runs", "metrics", "transfer", "anomalies", "experiments", "annotations", "control",
             "ops", "live", "reports", "publicapi", "front")


def _modname(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Fully qualified names of every module `path` imports, at any depth of the file (lazy imports count)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _modname(path).split(".")
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from pkg import module`
    return out


def _files(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts)


def _matches(name: str, libs: set[str]) -> set[str]:
    return {lib for lib in libs if name == lib or name.startswith(lib + ".")}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_the_package_imports_nothing_it_must_not(package):
    offenders = []
    for path in _files(package):
        bad = set().union(*[_matches(m, FORBIDDEN[package]) for m in imports_of(path)] or [set()])
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "\n".join(offenders)


def test_the_pure_core_imports_no_io_library():
    offenders = []
    for path in _files("observatory"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(IO_SEAMS):
            continue
        bad = set().union(*[_matches(m, IO_LIBS) for m in imports_of(path)] or [set()])
        if bad:
            offenders.append(f"{rel} imports {sorted(bad)} (I/O belongs in {', '.join(IO_SEAMS)})")
    assert not offenders, "\n".join(offenders)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan), i.e. import cycles."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def _module_graph(package: str) -> dict[str, set[str]]:
    mods = {_modname(p): p for p in _files(package)}
    graph = defaultdict(set)
    for name, path in mods.items():
        for imp in imports_of(path):
            # `from pkg import x` names pkg.x (a module, if one exists) or an attribute of pkg itself
            target = imp if imp in mods else imp.rsplit(".", 1)[0] if imp.rsplit(".", 1)[0] in mods else None
            if target and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return graph


@pytest.mark.parametrize("package", ["training", "observatory"])
def test_no_import_cycles_between_modules(package):
    assert _cycles(_module_graph(package)) == []


def _app_graph() -> dict[str, set[str]]:
    graph = defaultdict(set)
    for path in _files("webapp"):
        parts = path.relative_to(ROOT / "webapp").parts
        if len(parts) < 2:
            continue  # project-level modules (settings, urls, asgi) wire the apps together
        app = parts[0]
        for imp in imports_of(path):
            bits = imp.split(".")
            if len(bits) >= 2 and bits[0] == "webapp" and (ROOT / "webapp" / bits[1]).is_dir() and bits[1] != app:
                graph[app].add(bits[1])
    return graph


def test_web_apps_form_a_one_way_chain():
    graph = _app_graph()
    assert _cycles(graph) == []
    apps = sorted(p.name for p in (ROOT / "webapp").iterdir() if (p / "apps.py").exists())
    unplaced = [a for a in apps if a not in WEB_CHAIN]
    assert not unplaced, f"add {unplaced} to WEB_CHAIN (and to docs/ARCHITECTURE.md's web chain)"
    backwards = [f"{a} imports {b}" for a, deps in graph.items() for b in deps
                 if b in WEB_CHAIN and a in WEB_CHAIN and WEB_CHAIN.index(b) > WEB_CHAIN.index(a)]
    assert not backwards, "\n".join(backwards)


def test_project_level_web_modules_import_no_app():
    """settings/api/redis helpers are shared by every app, so an app import there would close a loop."""
    shared = [ROOT / "webapp" / n for n in ("api.py", "pagination.py", "redis.py", "settings.py", "celery.py")]
    offenders = [f"{p.name} imports {m}" for p in shared if p.exists() for m in imports_of(p)
                 if m.startswith("webapp.") and (ROOT / "webapp" / m.split(".")[1]).is_dir()]
    assert not offenders, "\n".join(offenders)


def test_the_checker_sees_cycles_and_lazy_imports(tmp_path):
    """The analysis itself: a lazy import inside a function counts, and a two-module loop is a cycle."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    import redis\n    from observatory.streams import Publisher\n")
    found = imports_of_at(src, tmp_path)
    assert "redis" in found and "observatory.streams.Publisher" in found
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


def imports_of_at(path: Path, root: Path) -> set[str]:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return imports_of(path)
    finally:
        ROOT = saved


# The two lines that must run before settings exist: they name the settings module.
SETTINGS_BOOTSTRAP = {"webapp/asgi.py", "webapp/celery.py"}
BOOTSTRAP_LINE = 'os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")'


def environment_reads(path: Path) -> list[tuple[int, str]]:
    """(line, source) of every use of os.environ / os.getenv / os.putenv, however imported."""
    tree = ast.parse(path.read_text(), filename=str(path))
    lines = path.read_text().splitlines()
    names = {"environ", "getenv", "putenv", "unsetenv", "environb"}
    out = []
    for node in ast.walk(tree):
        hit = (isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name)
               and node.value.id == "os")
        hit = hit or (isinstance(node, ast.ImportFrom) and node.module == "os"
                      and any(a.name in names for a in node.names))
        if hit:
            out.append((node.lineno, lines[node.lineno - 1].strip()))
    return out


def test_the_web_reads_its_environment_in_settings_only():
    offenders = []
    for path in _files("webapp"):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "webapp/settings.py":
            continue
        for line, src in environment_reads(path):
            if not (rel in SETTINGS_BOOTSTRAP and src == BOOTSTRAP_LINE):
                offenders.append(f"{rel}:{line}: {src}")
    assert not offenders, "read it in webapp/settings.py (typed, with a _FILE form for secrets):\n" + "\n".join(
        offenders)


def test_the_environment_checker_sees_every_spelling(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os\nfrom os import getenv\na = os.environ['X']\nb = os.getenv('Y')\n")
    assert [n for n, _ in environment_reads(src)] == [2, 3, 4]


# Templates follow the chain too. A template under templates/<app>/ (templates/registration/: Django's auth pages,
# owned by accounts) may name, with {% url %}, {% static %}, {% include %} and {% extends %}, only URLs, static files
# and templates of its own app or of apps before it in WEB_CHAIN. A later app adds to an earlier page through the
# page's extension point (webapp/runs/extensions.py), from its AppConfig.ready(), with templates and static files
# of its own (checked below too). The project-level templates/base.html wires the apps together, as webapp/urls.py
# does, and may name any app's URL. A static file belongs to the app STATIC_OWNERS lists it under; SITE_STATIC
# (the site's stylesheet, theme switch, icons, vendored libraries) belongs to the project: any template may name it.
STATIC_OWNERS = {
    "runs": ("js/series.js", "js/plotkit.js", "js/chartmodel.js", "js/plot.js", "js/chartmarks.js", "css/plot.css",
             "js/livedraw.js", "js/plotmarks.js",
             "js/chartlive.js", "js/view.js", "js/downloads.js", "js/charts.js", "js/zoom.js",
             "js/moe.js", "js/datapanel.js", "js/events.js", "js/runhead.js", "js/picker.js", "js/dashboard.js",
             "js/dashboard-bundle.js", "js/lazyintl.js",
             "js/runlist.js", "css/compare.css", "js/compare.js", "js/comparechart.js"),
    "anomalies": ("js/anomalies.js",),
    "experiments": ("js/forecast.js",),
    "annotations": ("js/annotation-thread.js", "js/annotations.js"),
    "control": ("js/operate.js", "js/operate-chart.js", "js/interventions.js"),
    "live": ("js/live.js",),
    "reports": ("js/minichart.js", "css/embed.css"),
    "publicapi": ("css/apidocs.css",),
    "front": ("js/front.js",),
}
SITE_STATIC = ("css/observatory.css", "js/theme.js", "favicon.svg", "favicon.ico", "vendor/")
TEMPLATE_DIRS = {"registration": "accounts"}  # template folders named otherwise than their app
PROJECT_TEMPLATES = {"base.html"}
_TAG = re.compile(r"""\{%\s*(url|static|include|extends)\s+(["'])(.+?)\2""")
_REGISTRY_CALLS = {"add_header": "template", "add_panel": "template", "add_run_list": "template",
                   "add_script": "static"}


def template_names(text: str) -> list[tuple[str, str]]:
    """(tag, literal name) for every {% url %}, {% static %}, {% include %}, {% extends %} naming a string; a
    variable (`{% static path %}`) comes from the extension point, whose registrations are checked instead."""
    return [(m.group(1), m.group(3)) for m in _TAG.finditer(text)]


def static_owner(path: str) -> str | None:
    """The app owning a static file, "" for the project's site-wide assets, None if nobody declared it."""
    if path.startswith(SITE_STATIC):
        return ""
    return next((app for app, files in STATIC_OWNERS.items() if path in files), None)


def template_owner(name: str) -> str | None:
    """The app owning a template name ("runs/dashboard.html" -> runs), "" for a project-level template."""
    if name in PROJECT_TEMPLATES:
        return ""
    folder = name.split("/", 1)[0] if "/" in name else None
    app = TEMPLATE_DIRS.get(folder, folder)
    return app if app in WEB_CHAIN else None


def url_owners() -> dict[str, str]:
    """URL name -> the app whose urls module declares it (through the project's include() of it)."""
    from django.urls import URLResolver, get_resolver

    out = {}

    def walk(patterns, app):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, app)
            elif p.name:
                out.setdefault(p.name, app)

    for p in get_resolver().url_patterns:
        module = getattr(p, "urlconf_name", None)
        module = getattr(module, "__name__", module)  # include("x") holds the imported module
        if isinstance(p, URLResolver) and isinstance(module, str) and module.startswith("webapp."):
            walk(p.url_patterns, module.split(".")[1])
    return out


def chain_offences(app: str, named: list[tuple[str, str]], urls: dict[str, str]) -> list[str]:
    """What `app` names that is not its own nor an earlier app's (or that no app owns)."""
    out = []
    for tag, name in named:
        owner = (urls.get(name) if tag == "url" else static_owner(name) if tag == "static" else template_owner(name))
        if owner is None:
            out.append(f"{tag} {name!r} has no owning app (declare it: STATIC_OWNERS, an app's urls or templates)")
        elif owner and WEB_CHAIN.index(owner) > WEB_CHAIN.index(app):
            out.append(f"{tag} {name!r} belongs to {owner}, after {app}: register it from {owner} instead")
    return out


def test_templates_name_only_their_own_app_and_apps_before_it():
    urls, offenders = url_owners(), []
    for path in sorted((ROOT / "templates").rglob("*")):
        if path.is_dir() or path.suffix not in (".html", ".txt"):
            continue
        name = path.relative_to(ROOT / "templates").as_posix()
        app = template_owner(name)
        if app == "":
            continue  # base.html: the project wires every app (see above)
        assert app is not None, f"templates/{name}: not in an app's folder (templates/<app>/, WEB_CHAIN)"
        offenders += [f"templates/{name}: {o}" for o in chain_offences(app, template_names(path.read_text()), urls)]
    assert not offenders, "\n".join(offenders)


def registrations(path: Path) -> list[tuple[str, str]]:
    """(kind, literal) of every extension-point registration in a module: add_header("x.html") -> template."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fn in _REGISTRY_CALLS:
                out.append((_REGISTRY_CALLS[fn], node.args[0].value))
    return out


def test_apps_register_their_own_templates_and_static_files():
    offenders = []
    for path in _files("webapp"):
        parts = path.relative_to(ROOT / "webapp").parts
        if len(parts) < 2 or parts[0] not in WEB_CHAIN:
            continue
        offenders += [f"{path.relative_to(ROOT)}: {o}" for o in chain_offences(parts[0], registrations(path), {})]
    assert not offenders, "\n".join(offenders)


def test_every_static_file_has_an_owner():
    files = [p.relative_to(ROOT / "static").as_posix() for p in (ROOT / "static").rglob("*") if p.is_file()]
    assert [f for f in files if static_owner(f) is None] == []


def test_the_template_checker_sees_a_later_apps_names():
    text = """{% extends "base.html" %}{% load static %}<a href="{% url 'run-log' run.id %}">
    {% include "annotations/panel.html" %}<script src="{% static 'js/live.js' %}"></script>{% static path %}"""
    found = chain_offences("runs", template_names(text), {"run-log": "control"})
    assert [o.split(" belongs")[0] for o in found] == ["url 'run-log'", "include 'annotations/panel.html'",
                                                        "static 'js/live.js'"]
    assert chain_offences("front", template_names(text), {"run-log": "control"}) == []


def test_only_live_writes_the_live_log():
    """Apps before live send frames through runs.extensions.send_frame, never to the run's live log themselves; and
    only the relay posts to the push tier (no process on the durable path calls nchan)."""
    places = [p.relative_to(ROOT).as_posix() for p in _files("webapp") if "livelog" in p.read_text()]
    assert places and all(p.startswith("webapp/live/") for p in places), places
    posting = [p.relative_to(ROOT).as_posix() for p in _files("webapp") if "NchanPublisher(" in p.read_text()]
    assert sorted(posting) == ["webapp/live/management/commands/relay.py", "webapp/settings.py"]
