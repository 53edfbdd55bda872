"""The house rules around the code: docs/ARCHITECTURE.md's picture against the import graph (so it cannot drift),
the document itself (what stays true: no dates, commit ids or timings), and bench/ (one harness, no import circle,
only the harness reaches into deploy/, the file and line limits). The import analysis is tests/test_architecture.py's.
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


def test_bench_files_keep_the_house_rules():
    long_files = [p.name for p in _files("bench") if len(p.read_text().splitlines()) > 400]
    long_lines = [f"{p.name}:{i}" for p in [*_files("bench"), ROOT / "bench" / "viewers.c"]
                  for i, line in enumerate(p.read_text().splitlines(), 1) if len(line) > 120]
    assert (long_files, long_lines) == ([], [])


def test_performance_md_is_what_the_results_render():
    """docs/PERFORMANCE.md is generated: after a bench files a run (or a narrative changes), run bench/report.py."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "bench/report.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, "docs/PERFORMANCE.md is out of date: run `python bench/report.py`"
