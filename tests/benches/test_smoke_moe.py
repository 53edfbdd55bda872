"""Smoke run of the MoE bench (--quick: one sequence length, one device, a tiny config; its own file, so that
xdist runs it beside the trainer smoke runs)."""

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.bench]


def test_moe_quick(run_bench):
    out, _ = run_bench("moe", "--quick", "--rounds", "1", "--json")
    assert out["drop_table"] and out["step_timing"]
