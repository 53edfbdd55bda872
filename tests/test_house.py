"""The house rules around the code: docs/ARCHITECTURE.md's picture against the import graph (so it cannot drift),
the document itself (what stays true: no dates, commit ids or timings), bench/ (one harness, no import circle,
only the harness reaches into deploy/), and the house rules for every source file (at most 400 lines, none over 120
characters). The import analysis is tests/test_architecture.py's.
"""

from __future__ import annotations

import re
from collections import defaultdict

from tests.test_architecture import ROOT, WEB_CHAIN, _cycles, _files, imports_of

# docs/ARCHITECTURE.md's picture is checked against the code: its import arrows (`a -.-> b` in a mermaid block) are
# exactly the imports between the top-level packages, and its web chain line is WEB_CHAIN. It states what stays
# true: at most 300 lines, no dated entries, no commit ids, no timings (those are bench/results' and PERFORMANCE.md's).
ARCH_DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("observatory", "training", "webapp", "deploy", "bench")
_ARROW = re.compile(r"^\s*([A-Za-z_]\w*)\s*-\.->\s*([A-Za-z_]\w*)\s*$")


def drawn_imports(text: str) -> set[tuple[str, str]]:
    blocks = re.findall(r"```mermaid\n(.*?)```", text, re.S)
    return {(m[1], m[2]) for block in blocks for line in block.splitlines() if (m := _ARROW.match(line))}


def package_imports() -> set[tuple[str, str]]:
    out = set()
    for package in PACKAGES:
        for path in _files(package):
            out |= {(package, m.split(".")[0]) for m in imports_of(path)
                    if m.split(".")[0] in PACKAGES + ("tests",) and m.split(".")[0] != package}
    return out


def test_the_architecture_picture_draws_the_import_graph():
    drawn, real = drawn_imports(ARCH_DOC.read_text()), package_imports()
    assert not real - drawn, f"imports the picture lacks (draw them, or remove the import): {sorted(real - drawn)}"
    assert not drawn - real, f"arrows no import makes: {sorted(drawn - real)}"


def test_the_architecture_documents_the_web_chain_as_the_code_has_it():
    lines = ARCH_DOC.read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.strip().startswith("accounts →"))
    chain = " ".join(ln.strip() for ln in lines[first:first + 3] if ln.strip().startswith(("accounts", "→")))
    assert tuple(a.strip() for a in chain.split("→")) == WEB_CHAIN


def test_the_picture_checker_reads_arrows():
    text = "```mermaid\nflowchart LR\n  training -.-> observatory\n  a --> b\n```\n"
    assert drawn_imports(text) == {("training", "observatory")}


def test_the_architecture_document_states_what_stays_true():
    text = ARCH_DOC.read_text()
    assert len(text.splitlines()) <= 300
    dated = re.findall(r"\b(?:20\d\d-\d\d-\d\d|\(\d\d-\d\d\b|[Uu]ntil \d\d-\d\d)", text)
    commits = [w for w in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"\d", w) and re.search(r"[a-f]", w)]
    timings = re.findall(r"\d[\d,.]*\s?(?:ms|µs|MB|GB|KB)\b|\bload1\b|\d+(?:\.\d+)?\s?x faster", text)
    assert (dated, commits, timings) == ([], [], [])


# bench/: one harness, no import circle, only the harness reaches into deploy/, house rules per file.
def test_bench_has_no_import_cycle_and_only_the_harness_imports_deploy():
    graph = defaultdict(set)
    mods = {p.stem for p in _files("bench")}
    offenders = []
    for path in _files("bench"):
        for imp in imports_of(path):
            head = imp.split(".")
            name = head[1] if head[0] == "bench" and len(head) > 1 else head[0]
            if name in mods and name != path.stem:
                graph[path.stem].add(name)
            if head[0] in ("deploy", "run_local") and path.stem != "harness":
                offenders.append(f"bench/{path.name} imports {imp} (go through bench/harness.py)")
    assert _cycles(graph) == []
    assert offenders == []


# bench/'s programs (*.py, *.c, *.h) at its top level are the benches and their harness: at most BENCH_MAX_LINES
# (issue 47; cuts by redundancy first, then deliberate retirements, each marked in its bench/results/<topic>.md with
# the commit that holds it). bench/data/'s programs are counted apart: issue 47 measured "bench/ 6.9k lines in 32
# files" when bench/data held one program; the data tools (extractors that rebuild the frozen held-out sets byte for
# byte from their public sources) came after, for issue 48, and are data provenance, not measurements. They are held
# by their own ratchet at what they hold (BENCH_DATA_LINES_NOW, lowered as they shrink).
BENCH_MAX_LINES = 5000
BENCH_DATA_LINES_NOW = 1280   # 1091, then the sixth set: its extractor (93) and its ladders.py entry (2); the
# seventh set: its extractor (92) and its ladders.py entry (2)


def bench_lines(data: bool = False) -> dict[str, int]:
    files = (ROOT / "bench" / "data").rglob("*") if data else (ROOT / "bench").glob("*")
    return {str(p.relative_to(ROOT / "bench")): len(p.read_text().splitlines())
            for p in sorted(files) if p.suffix in (".py", ".c", ".h")}


def test_bench_stays_within_its_line_budget():
    lines = bench_lines()
    assert sum(lines.values()) <= BENCH_MAX_LINES, sorted(lines.items(), key=lambda kv: -kv[1])


def test_bench_data_tools_stay_within_their_ratchet():
    lines = bench_lines(data=True)
    assert sum(lines.values()) <= BENCH_DATA_LINES_NOW, sorted(lines.items(), key=lambda kv: -kv[1])


# House rules for every source file: at most 400 lines, no line over 120 characters.
# Source is what people write and edit: code and configuration, by suffix or by name below. Not source, and why:
# - Markdown (docs/, READMEs, bench/results/): prose and tables (a table row cannot wrap); docs/PERFORMANCE.md is
#   generated, and docs/ARCHITECTURE.md has its own limit (above);
# - vendored files (static/vendor/, tests/assets/): third parties' minified builds, never edited here;
# - Django migrations: written by `makemigrations` and never rewritten once applied;
# - data (json, csv, gz, jsonl, images, lock and requirement lists) and what is not in the tree (.venv, var, caches).
MAX_LINES, MAX_WIDTH = 400, 120
SOURCE_SUFFIXES = {".py", ".js", ".css", ".html", ".c", ".h", ".sh", ".conf", ".toml", ".yaml", ".yml", ".ini",
                   ".cfg", ".proxy"}
SOURCE_NAMES = {"Makefile", "Dockerfile", "run", ".env"}
NOT_SOURCE_DIRS = {".git", ".venv", "var", "node_modules", "__pycache__", ".pytest_cache", "build", "dist", "wandb",
                   "bench-results", "migrations", "vendor", "assets", ".gl", ".whl"}
# Transitional: files other engineers are rewriting right now, exempt until their work lands (then emptied).
# path -> the rules it may break for now ("lines", "width").
BEING_REWRITTEN: dict[str, set[str]] = {}


def source_files(root=ROOT) -> list:
    import os
    from pathlib import Path

    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in NOT_SOURCE_DIRS and not d.endswith(".egg-info")
                         and (d == ".ci" or not d.startswith(".")))
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix in SOURCE_SUFFIXES or name in SOURCE_NAMES or name.startswith("Dockerfile"):
                out.append(path)
    return out


def house_offences(paths, root=ROOT, exempt=None) -> list[str]:
    exempt = BEING_REWRITTEN if exempt is None else exempt
    out = []
    for path in paths:
        rel = str(path.relative_to(root))
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if len(lines) > MAX_LINES and "lines" not in exempt.get(rel, ()):
            out.append(f"{rel}: {len(lines)} lines (at most {MAX_LINES}: split it)")
        if "width" not in exempt.get(rel, ()):
            out += [f"{rel}:{i}: {len(line)} characters (at most {MAX_WIDTH})" for i, line in enumerate(lines, 1)
                    if len(line) > MAX_WIDTH]
    return out


def test_every_source_file_keeps_the_house_rules():
    assert house_offences(source_files()) == []


def test_the_house_rules_see_long_files_and_lines_and_skip_what_is_not_source(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "long.js").write_text("x;\n" * (MAX_LINES + 1))
    (tmp_path / "wide.html").write_text("<p>" + "w" * MAX_WIDTH + "</p>\n")
    (tmp_path / "Makefile").write_text("all:\n\t" + "x" * MAX_WIDTH + "\n")
    for skipped in ("notes.md", "data.json", "vendor/lib.min.js", "app/migrations/0001_initial.py"):
        (tmp_path / skipped).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / skipped).write_text("x" * 500 + "\n")
    found = house_offences(source_files(tmp_path), tmp_path, exempt={})
    assert [f.split(":")[0] for f in found] == ["Makefile", "long.js", "wide.html"]
    assert house_offences(source_files(tmp_path), tmp_path, exempt={"long.js": {"lines"}})[1:] == [found[2]]


def test_the_transitional_exemptions_name_files_that_still_need_them():
    """An exemption goes when its file keeps the rules (or is gone): the list only shrinks."""
    for rel, rules in BEING_REWRITTEN.items():
        path = ROOT / rel
        assert path.exists(), f"{rel} is gone: remove it from BEING_REWRITTEN"
        still = house_offences([path], exempt={})
        assert {("lines" if " lines " in f else "width") for f in still} == rules, (rel, still)


# static/js as a whole: issue 46 wants at most 4,500 lines (a chart layer a newcomer can read). Until it gets there
# this holds what has landed, set at each merge to what the readable code holds: lines "saved" by squeezing (run-on
# expressions, one-letter names, "why" comments cut to fit) are not savings, and such commits were reverted.
JS_TARGET, JS_RATCHET = 4_500, 5_637  # +46: a live chart's unchanged marks kept as they were (alloc46)


def js_lines(root=ROOT) -> int:
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (root / "static" / "js").glob("*.js"))


def test_static_js_keeps_within_its_line_budget():
    total = js_lines()
    assert total <= JS_RATCHET, f"static/js is {total} lines: at most {JS_RATCHET} (issue 46's goal: {JS_TARGET})"


def test_one_nchan_configuration():
    """deploy/push.conf is the one nchan configuration: no other source file writes an nchan directive, and the
    nginx.conf `make run` starts (deploy/push_tier.py nchan_config) holds every directive of it but the replicas'."""
    from pathlib import Path

    from deploy.push_tier import nchan_config

    directive = re.compile(r"^\s*(nchan_[a-z_]+)\s", re.M)
    # the one exception: the size of make run's one nginx process (an http-level setting, no channel rule)
    process = {"deploy/push_tier.py": ["nchan_shared_memory_size"]}
    writers = {str(p.relative_to(ROOT)): directive.findall(p.read_text(errors="replace")) for p in source_files()}
    assert {p: d for p, d in writers.items() if d and p != "deploy/push.conf"} == process
    rendered = nchan_config(Path("/var/obs"), "127.0.0.1", 8000, 8001, 8002, 8003)
    wanted = [line.split("#")[0].strip() for line in (ROOT / "deploy" / "push.conf").read_text().splitlines()
              if directive.match(line) and "@replica" not in line]
    assert wanted and [w for w in wanted if w not in rendered] == []
    assert "nchan_redis" not in rendered  # one nginx keeps its channels in memory


def test_performance_md_is_what_the_results_render():
    """docs/PERFORMANCE.md is generated: after a bench files a run (or a narrative changes), run bench/report.py."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "bench/report.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, "docs/PERFORMANCE.md is out of date: run `python bench/report.py`"
