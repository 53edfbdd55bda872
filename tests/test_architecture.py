"""The layering in docs/ARCHITECTURE.md, enforced: the core imports no framework, the worker and the web never
import each other (they meet only through Redis and observatory.contract)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FORBIDDEN = {
    "observatory": {"django", "channels", "celery", "webapp", "jax", "jaxlib", "optax", "orbax", "training"},
    "training": {"django", "channels", "celery", "webapp"},
    "webapp": {"jax", "jaxlib", "optax", "orbax", "training"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_the_package_imports_nothing_it_must_not(package):
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_roots(path) & FORBIDDEN[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "\n".join(offenders)
