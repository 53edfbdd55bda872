"""The test-and-bench plumbing in tests/support.py: ports no two processes are handed at once (deploy/run_local.py's
free_port, which tests/support.py re-exports), a private Redis."""

from __future__ import annotations

import subprocess
import sys

import redis as redis_lib

from deploy import run_local
from tests import support


def test_a_port_handed_out_is_not_handed_out_again_while_held(monkeypatch, tmp_path):
    """Between free_port() and its server's bind, the kernel may pick the same port for another xdist worker."""
    picks = iter([40001, 40001, 40002])
    monkeypatch.setattr(run_local, "_kernel_port", lambda: next(picks))
    monkeypatch.setattr(run_local, "PORTS_DIR", tmp_path)
    assert support.free_port() == 40001
    assert support.free_port() == 40002


def test_a_hand_out_older_than_the_hold_is_released(monkeypatch, tmp_path):
    picks = iter([40001, 40001, 40001])
    monkeypatch.setattr(run_local, "_kernel_port", lambda: next(picks))
    monkeypatch.setattr(run_local, "PORTS_DIR", tmp_path)
    monkeypatch.setattr(run_local, "PORT_HOLD_S", -1.0)
    assert support.free_port() == 40001
    assert support.free_port() == 40001


def test_ports_handed_to_two_processes_differ():
    code = "from tests.support import free_port; print(' '.join(str(free_port()) for _ in range(200)))"
    outs = [subprocess.Popen([sys.executable, "-c", code], cwd=support.Path(__file__).parents[1],
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]
    ports = [set(map(int, p.communicate(timeout=60)[0].split())) for p in outs]
    assert len(ports[0]) == len(ports[1]) == 200 and not ports[0] & ports[1]


def test_a_private_redis_restarts_empty_and_its_directory_goes_with_it():
    with support.PrivateRedis() as redis:
        redis_lib.Redis(port=redis.port).set("k", "v")
        client = redis.restart()
        assert client.get("k") is None
        directory = redis.dir
    assert redis.proc.poll() is not None and not directory.exists()
