"""The operator of the control tests: sends commands to one run as the web and the CLI do, reads back acks and
published records (the `op` fixture of tests/training/conftest.py)."""

from __future__ import annotations

import uuid

from observatory import contract


class Operator:
    """Sends commands to one run the way the web and the CLI do, and reads back acks and published records."""

    def __init__(self, client, run_id: str, read_stream, until):
        self.client, self.run_id, self.read_stream, self.until = client, run_id, read_stream, until

    def send(self, command: str, args=None, cmd_id: str | None = None, reason: str = "test") -> str:
        cmd_id = cmd_id or uuid.uuid4().hex
        fields = contract.command_fields(cmd_id, command, args, reason, "tester")
        self.client.xadd(contract.control_stream(self.run_id),
                         contract.sign_command(self.run_id, fields, contract.load_run_control_key(self.run_id)))
        return cmd_id

    def acks(self, cmd_id: str) -> list[dict]:
        entries = self.client.xrange(contract.ack_stream(self.run_id))
        return [a for a in ({k.decode(): v.decode() for k, v in f.items()} for _, f in entries) if a["id"] == cmd_id]

    def wait_ack(self, cmd_id: str, final=("applied", "rejected")) -> dict:
        """The last final ack of a command, once there is one."""
        return self.until(lambda: [a for a in self.acks(cmd_id) if a["status"] in final], 120,
                          f"a {final} ack for {cmd_id}")[-1]

    def do(self, command: str, args=None, **kw) -> dict:
        return self.wait_ack(self.send(command, args, **kw))

    def entry(self, cmd_id: str) -> dict:
        """The signed fields of a command as they went on the control stream (what an attacker can capture)."""
        stream = self.client.xrange(contract.control_stream(self.run_id))
        return next(f for _, f in stream if f[b"id"] == cmd_id.encode())

    def replay(self, fields: dict) -> dict:
        """Put captured fields on the control stream again, unchanged, and return the trainer's new final ack."""
        cmd_id = fields[b"id"].decode()
        n = len([a for a in self.acks(cmd_id) if a["status"] in ("applied", "rejected")])
        self.client.xadd(contract.control_stream(self.run_id), fields)
        return self.until(lambda: (a := [a for a in self.acks(cmd_id) if a["status"] in ("applied", "rejected")])
                          and len(a) > n and a, 120, f"the ack of the replayed {cmd_id}")[-1]

    def signed(self, command: str, args=None, issued_at: float | None = None) -> dict:
        """A correctly signed entry for a new id, issued at `issued_at` (the sender's clock)."""
        fields = {**contract.command_fields("t-" + uuid.uuid4().hex, command, args, "test", "tester"),
                  "t": repr(issued_at)}
        key = contract.load_run_control_key(self.run_id)
        return {k.encode(): v.encode() for k, v in contract.sign_command(self.run_id, fields, key).items()}

    def stream(self) -> list[contract.Message]:
        return self.read_stream(self.client, self.run_id)

    def metrics(self) -> list[dict]:
        return [m.data for m in self.stream() if m.kind == "metrics"]

    def events(self, name: str) -> list[dict]:
        return [m.data for m in self.stream() if m.kind == "event" and m.data["name"] == name]

    def metrics_after(self, n_before: int) -> list[dict]:
        """The metrics records after the first n_before, once there is at least one."""
        return self.until(lambda: self.metrics()[n_before:], 120, f"a metrics record after the first {n_before}")

    def metrics_through(self, step: int) -> list[dict]:
        """The metrics records once the one of `step` reached the stream (the publisher writes asynchronously)."""
        return self.until(lambda: (ms := self.metrics()) and ms[-1]["step"] >= step and ms, 120,
                          f"step {step} on the stream")
