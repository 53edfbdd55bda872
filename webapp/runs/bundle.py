"""The dashboard's scripts but dashboard.js as one static file, "js/dashboard-bundle.js": one request for ~20.

Each of them was a request of its own, six at a time over HTTP/1.1, so the page waited for four rounds of them after
its HTML; one file is one round (dashboard.js comes beside it, so that its start is a task of its own). The parts,
in order, are the <script> files templates/runs/_dashboard_scripts.html names (read, never rendered: it is the
list), where `{% include %}` reads the named template's and `{% for path in extensions.scripts %}` stands for the
apps' scripts (extensions.add_script; lazy ones still load after the first paint, <meta name="obs-lazy-script">).

BundleFinder, a staticfiles finder (settings.STATICFILES_FINDERS), writes the file under
OBS_DATA_DIR/built-static/<checkout>/ when asked for it and whenever a part changed, so it is a static file like the
others: collectstatic collects, hashes and compresses it; WhiteNoise serves it from a checkout that has not
collected; no build step, no npm. The file
starts "use strict" (every part does) and runs each part in a block of its own, whose error is thrown again outside
it: a part that fails, fails alone, as its own <script> did.

Its first line is V8's compile hint, `//# allFunctionsCalledOnLoad` (to other engines a comment): nearly every
function in it runs before the first paint, so Chromium compiles them all while it streams the file in, on a
background thread, instead of each one lazily on the main thread at its first call (the dashboard's start and first
frame: ~20 ms less main-thread CPU before the first paint of a 1M-step run, in Chromium's trace on a busy 2-core box).

Each part is minified (rjsmin: comments and blanks out; the vendored one already is), since the page parses the whole
file before its first paint: ~225 KB of commented sources become ~150 KB. Read and debug the parts in static/js; the
bundle keeps each part's name on the line before it. acorn parses every static/js file and its minified text to the
same syntax tree (positions aside), checked when the minifier came in.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

import rjsmin

from django.conf import settings
from django.contrib.staticfiles import finders
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage
from django.template.loader import get_template

NAME = "js/dashboard-bundle.js"
LIST = "runs/_dashboard_scripts.html"
COMPILE_HINT = "//# allFunctionsCalledOnLoad\n"  # V8: compile every function of the file eagerly, off the main thread
_TOKEN = re.compile(r"""<script src="\{% static '([^']+)' %\}"></script>|\{% include "([^"]+)" %\}"""
                    r"""|\{% for path in extensions\.scripts %\}""")


def parts(template: str = LIST) -> list[str]:
    """The static names of the bundle's parts, in order."""
    from webapp.runs import extensions

    out = []
    for m in _TOKEN.finditer(get_template(template).template.source):
        if m[1]:
            out.append(m[1])
        elif m[2]:
            out += parts(m[2])
        else:
            out += extensions.dashboard()["scripts"]
    return out


def wrap(name: str, source: str) -> str:
    """One part: run in a block of its own; an error it throws is thrown again after it (an uncaught error, as its
    own <script>'s was), and the next part runs."""
    return f"// {name}\ntry {{\n{source}\n}} catch (e) {{ setTimeout(() => {{ throw e; }}); }}\n"


def minified(name: str, source: str) -> str:
    return source if name.endswith(".min.js") else rjsmin.jsmin(source)


def text() -> str:
    out = [COMPILE_HINT + '"use strict";\n']  # (a comment before the directive: still the file's first statement)
    for name in parts():
        path = finders.find(name)
        if not path:
            raise FileNotFoundError(f"{LIST} names {name}, which no static folder has")
        out.append(wrap(name, minified(name, Path(path).read_text())))
    return "".join(out)


def out_dir() -> Path:
    """Under the data folder, one per checkout: two checkouts served from one data folder (a bench comparing the
    landed tree with this one) would otherwise rewrite each other's bundle between a request's stat and its read."""
    tree = hashlib.sha1(str(settings.BASE_DIR).encode()).hexdigest()[:12]
    return Path(settings.DATA_DIR) / "built-static" / tree


def build() -> Path:
    """The bundle's file, written again (atomically) when its parts changed."""
    path = out_dir() / NAME
    body = text()
    if not path.exists() or path.read_text() != body:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".bundle-")
        with os.fdopen(fd, "w") as f:
            f.write(body)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return path


class BundleFinder(BaseFinder):
    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        find_all = find_all or kwargs.get("all", False)  # (Django < 6's name for it)
        if path != NAME:
            return [] if find_all else None
        built = str(build())
        return [built] if find_all else built

    def list(self, ignore_patterns):
        build()
        yield NAME, FileSystemStorage(location=out_dir())
