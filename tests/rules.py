"""The contract's verdicts that each entry point's shared-rules test compares its own with (the cases themselves are
tests/conftest.py's run_id_cases, command_id_cases and mixture_cases fixtures)."""

from __future__ import annotations

from observatory import contract


def mixture_ok(w) -> bool:
    """Whether the contract accepts `w` as mixture weights (contract.check_mixture)."""
    try:
        contract.check_mixture(w)
    except contract.MixtureError:
        return False
    return True
