"""The command API and the audit trail: checks beyond the schema, retries by id, outcomes read back from the acks,
commands from the CLI, undone commands, and the public view of interventions."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from observatory import contract
from tests.rules import mixture_ok
from webapp.accounts.models import Profile
from webapp.control.models import OperatorCommand
from webapp.runs.models import Run, RunEvent

from .conftest import RUN

pytestmark = pytest.mark.django_db
URL = f"/api/runs/{RUN}/commands/"


def post(client, **body):
    return client.post(URL, json.dumps(body), content_type="application/json")


def outcomes(client) -> dict[str, dict]:
    return {c["id"]: c for c in client.get(URL).json()["commands"]}


def test_a_command_is_recorded_then_signed_onto_the_control_stream(operator, run, fake_trainer):
    resp = post(operator, id="cmd-00000001", command="set-lr-multiplier", args={"value": 0.5}, reason="calmer")
    assert resp.status_code == 202 and resp.json()["outcome"] == "sent" and resp.json()["user"] == "olga"
    [entry] = fake_trainer.sent()
    contract.verify_command(RUN, entry, contract.load_run_control_key(RUN))  # signed with the run's key
    assert entry["id"] == "cmd-00000001" and json.loads(entry["args"]) == {"value": 0.5}
    assert OperatorCommand.objects.get(pk="cmd-00000001").sent_entry


@pytest.mark.parametrize("body,error", [
    ({"command": "pause"}, "reason is required"),
    ({"command": "stop", "reason": "done"}, "stop is destructive"),
    ({"command": "rollback", "args": {"step": 10}, "reason": "spike", "confirm": "yes"}, "rollback is destructive"),
    ({"command": "set-mixture", "args": {"weights": {"code": 0.5, "prose": -0.1}}, "reason": "x"},
     "finite number >= 0"),
    ({"command": "set-mixture", "args": {"weights": {"code": 0.5, "poetry": 0.5}}, "reason": "x"}, "unknown domain"),
    ({"command": "inject-fault", "args": {"fault": "nan"}, "reason": "x"}, "fault injection is disabled"),
    ({"command": "set-lr-multiplier", "args": {"value": -1}, "reason": "x"}, "value must be a number"),
    ({"command": "fly", "reason": "x"}, "unknown command"),
])
def test_what_the_trainer_would_refuse_is_refused_before_sending(operator, run, fake_trainer, body, error):
    resp = post(operator, **body)
    assert resp.status_code == 400 and error in resp.json()["error"]
    assert fake_trainer.sent() == [] and not OperatorCommand.objects.exists()


def test_confirmed_destructive_commands_and_allowed_faults_go_through(operator, run, fake_trainer):
    assert post(operator, command="rollback", args={"step": 10}, reason="spike", confirm=True).status_code == 202
    assert post(operator, command="set-mixture", args={"weights": {"code": 0.1, "prose": 0.9}},
                reason="more prose").status_code == 202
    Run.objects.filter(pk=RUN).update(config={**run.config, "train": {**run.config["train"], "allow_faults": True}})
    assert post(operator, command="inject-fault", args={"fault": "nan", "steps": 2}, reason="demo").status_code == 202
    assert [e["command"] for e in fake_trainer.sent()] == ["rollback", "set-mixture", "inject-fault"]


def test_the_api_gives_the_contracts_verdict_on_ids_and_mixtures(operator, run, fake_trainer, command_id_cases,
                                                                 mixture_cases):
    for cid in command_id_cases:
        resp = post(operator, id=cid, command="pause", reason="rules")
        assert resp.status_code == (202 if contract.COMMAND_ID_RE.match(cid) else 400), (repr(cid), resp.content)
    for w in mixture_cases:
        weights = {{"a": "code", "b": "prose"}[k]: v for k, v in w.items()}
        resp = post(operator, command="set-mixture", args={"weights": weights}, reason="rules")
        assert resp.status_code == (202 if mixture_ok(w) else 400), (w, resp.content)
    sent = [json.loads(e["args"])["weights"] for e in fake_trainer.sent() if e["command"] == "set-mixture"]
    assert {"code": 0.5, "prose": 0.4} in sent  # relative weights go to the trainer as given: it scales them


def test_a_retry_reuses_the_id_and_is_never_a_second_command(operator, run, fake_trainer):
    body = dict(id="retry-0000001", command="pause", reason="look")
    assert post(operator, **body).status_code == 202
    again = post(operator, **body)  # no answer yet: the same entry goes on the stream again, same id
    assert again.status_code == 202 and again.json()["sent_count"] == 2
    assert [e["id"] for e in fake_trainer.sent()] == ["retry-0000001", "retry-0000001"]
    assert post(operator, **{**body, "command": "resume"}).status_code == 409
    fake_trainer.ack("retry-0000001", "accepted")
    fake_trainer.ack("retry-0000001", "applied", "paused at step 40", 40)
    fake_trainer.ack("retry-0000001", "applied", "duplicate id: already applied, not applied again", 40)
    assert outcomes(operator)["retry-0000001"]["outcome"] == "applied"
    assert post(operator, **body).status_code == 200  # answered: returned as it is, not sent a third time
    assert len(fake_trainer.sent()) == 2


def test_a_retry_past_the_trainers_window_must_be_a_new_command(operator, run, fake_trainer):
    body = dict(id="late-0000001", command="pause", reason="look")
    assert post(operator, **body).status_code == 202
    first = fake_trainer.sent()[0]
    assert first["nonce"] and contract.parse_command(first).t > 0  # signed issue time and nonce
    OperatorCommand.objects.filter(pk="late-0000001").update(
        created_at=timezone.now() - dt.timedelta(seconds=contract.STALE_AFTER_S + 5))
    resp = post(operator, **body)  # the trainer may no longer remember the id: it could apply it twice
    assert resp.status_code == 409 and "send it again as a new command" in resp.json()["error"]
    assert len(fake_trainer.sent()) == 1


def test_a_refused_replay_never_changes_what_the_log_says_the_trainer_did(operator, run, fake_trainer):
    post(operator, id="once-0000001", command="set-lr-multiplier", args={"value": 0.5}, reason="calmer")
    post(operator, id="nope-0000001", command="resume", reason="go on")
    # Read in one sync: the answers, then the trainer's refusals of replayed copies of both entries.
    fake_trainer.ack("once-0000001", "accepted")
    fake_trainer.ack("once-0000001", "applied", "LR multiplier 1 -> 0.5", 41)
    fake_trainer.ack("nope-0000001", "rejected", "not paused", 41)
    fake_trainer.ack("once-0000001", "rejected", "id once-0000001 was undone by rollback rb-1; send it again "
                                                 "with a new id", 42)
    fake_trainer.ack("nope-0000001", "applied", "duplicate id: already applied, not applied again", 42)
    got = outcomes(operator)
    assert got["once-0000001"]["outcome"] == "applied" and got["once-0000001"]["detail"] == "LR multiplier 1 -> 0.5"
    assert got["nope-0000001"]["outcome"] == "rejected" and got["nope-0000001"]["detail"] == "not paused"
    page = operator.get(f"/runs/{RUN}/log/").content.decode()
    assert 'id="log-nope-0000001" data-outcome="rejected"' in page


def test_outcomes_follow_the_acks_and_only_acks_after_the_send_count(operator, run, fake_trainer):
    fake_trainer.ack("old-00000001", "rejected", "an ack from before this command was sent")
    post(operator, id="old-00000001", command="checkpoint", reason="save")
    post(operator, id="bad-00000001", command="rollback", args={"step": 5}, reason="x", confirm=True)
    assert outcomes(operator)["old-00000001"]["outcome"] == "sent"
    fake_trainer.ack("old-00000001", "accepted", "queued")
    assert outcomes(operator)["old-00000001"]["outcome"] == "accepted"
    fake_trainer.ack("old-00000001", "applied", "checkpoint at step 42", 42)
    fake_trainer.ack("bad-00000001", "rejected", "no checkpoint at step 5 or before it", 42)
    got = outcomes(operator)
    assert got["old-00000001"]["outcome"] == "applied" and got["old-00000001"]["step"] == 42
    assert got["bad-00000001"]["outcome"] == "rejected" and "no checkpoint" in got["bad-00000001"]["detail"]


def test_an_unanswered_command_shows_as_no_answer(operator, run):
    post(operator, id="slow-0000001", command="pause", reason="x")
    OperatorCommand.objects.filter(pk="slow-0000001").update(created_at=timezone.now() - dt.timedelta(minutes=5))
    assert outcomes(operator)["slow-0000001"]["outcome"] == "timeout"


def test_commands_sent_with_the_cli_join_the_audit_trail_and_forged_ones_do_not(operator, run, redis_client):
    fields = contract.command_fields("cli-0000001", "set-lr-multiplier", {"value": 2.0}, "from a shell", "ana")
    key = contract.load_run_control_key(RUN)
    redis_client.xadd(contract.control_stream(RUN), contract.sign_command(RUN, fields, key))
    forged = contract.command_fields("cli-0000002", "stop", {}, "forged", "mallory")
    redis_client.xadd(contract.control_stream(RUN), contract.sign_command(RUN, forged, b"x" * 32))
    got = outcomes(operator)
    assert got["cli-0000001"]["source"] == "cli" and got["cli-0000001"]["user"] == "ana"
    assert got["cli-0000001"]["reason"] == "from a shell" and "cli-0000002" not in got


def test_a_rollback_marks_the_commands_it_undid_and_they_cannot_be_retried_by_id(operator, run, fake_trainer):
    post(operator, id="lr-00000001", command="set-lr-multiplier", args={"value": 0.5}, reason="calmer")
    fake_trainer.ack("lr-00000001", "applied", "LR multiplier 1 -> 0.5", 41)
    assert outcomes(operator)["lr-00000001"]["outcome"] == "applied"
    RunEvent.objects.create(run=run, kind="event", name="commands_rolled_back", step=30, entry_id="9-0",
                            payload={"ids": ["lr-00000001"], "by": "rb-00000001", "to_step": 30,
                                     "detail": "undone by rollback rb-00000001 to step 30"})
    got = outcomes(operator)["lr-00000001"]
    assert got["outcome"] == "undone" and got["undone_by"] == "rb-00000001" and "step 30" in got["undone_detail"]
    resp = post(operator, id="lr-00000001", command="set-lr-multiplier", args={"value": 0.5}, reason="calmer")
    assert resp.status_code == 409 and "undone" in resp.json()["error"]


def test_interventions_are_public_and_name_only_operators_who_opted_in(operator, run, fake_trainer):
    post(operator, id="pub-0000001", command="pause", reason="<b>look</b> at the spike")
    fake_trainer.ack("pub-0000001", "applied", "paused at step 40", 40)
    anon = Client()
    [item] = anon.get(f"/api/runs/{RUN}/interventions/").json()["interventions"]
    assert item["reason"] == "<b>look</b> at the spike" and item["step"] == 40 and item["user"] is None
    assert "sent_count" not in item
    page = anon.get(f"/runs/{RUN}/log/").content.decode()
    assert "&lt;b&gt;look&lt;/b&gt; at the spike" in page and "olga" not in page and "an operator" in page
    profile = Profile.of(operator.user)
    profile.display_name, profile.show_name_publicly = "Olga O.", True
    profile.save()
    assert anon.get(f"/api/runs/{RUN}/interventions/").json()["interventions"][0]["user"] == "Olga O."
    assert "Olga O." in anon.get(f"/runs/{RUN}/log/").content.decode()


def test_the_control_stream_names_a_web_operator_only_as_public_pages_would(operator, run, fake_trainer):
    # the trainer writes the entry's `user` into its public events and phase text ("paused by …")
    post(operator, id="who-0000001", command="pause", reason="look")
    profile = Profile.of(operator.user)
    profile.display_name, profile.show_name_publicly = "Olga O.", True
    profile.save()
    post(operator, id="who-0000002", command="resume", reason="ok")
    assert [e["user"] for e in fake_trainer.sent()] == ["operator", "Olga O."]


def test_the_profile_page_offers_the_opt_in(operator):
    resp = operator.post("/accounts/profile/", {"display_name": "O", "show_name_publicly": "on"})
    assert resp.status_code == 302 and Profile.of(operator.user).show_name_publicly
    assert "Show my name on my operator commands" in operator.get("/accounts/profile/").content.decode()


def test_members_get_403_everywhere_operators_steer(member, run):
    for path in ("/operate/", "/api/operate/", URL, f"/api/runs/{RUN}/plan/?tokens=5000000"):
        assert member.get(path).status_code == 403, path
    assert post(member, command="pause", reason="x").status_code == 403


def test_the_panel_renders_its_forms_from_the_contract_schema(operator, run):
    html = operator.get("/operate/").content.decode()
    assert "/static/js/operate.js" in html and "<script>" not in html.replace('<script src', '')
    page = json.loads(html.split('id="operate-data" type="application/json">')[1].split("</script>")[0])
    assert [s["name"] for s in page["specs"]] == list(contract.COMMAND_SPECS)
    rollback = next(s for s in page["specs"] if s["name"] == "rollback")
    assert rollback["destructive"] and [a["name"] for a in rollback["args"]] == ["step", "skip_batches"]
    [weights] = next(s for s in page["specs"] if s["name"] == "set-mixture")["args"]
    assert weights["help"] == contract.MIXTURE_RULE and weights["lo"] == 0  # the panel's rule, from the contract
    [row] = page["snapshot"]["runs"]
    assert row["id"] == RUN and row["mixture"]["domains"] == ["code", "prose"] and row["allow_faults"] is False


def test_the_snapshot_carries_the_published_checkpoints_and_the_live_heartbeat(operator, run, redis_client):
    redis_client.set(contract.checkpoints_key(RUN), json.dumps({"t": 1.0, "checkpoints": [
        {"step": 30, "why": "periodic", "kind": "periodic", "saved_at": 1.0, "bytes": 10, "kept": "newest 3"}]}))
    redis_client.set(contract.heartbeat_key(RUN), json.dumps({"t": 2.0, "phase": "paused", "step": 41,
                                                               "tokens": 5248, "token_budget": 1_000_000,
                                                               "eta_s": None, "steps_per_s": 0.0}))
    [row] = operator.get("/api/operate/").json()["runs"]
    assert row["checkpoints"][0]["step"] == 30 and row["step"] == 41 and row["tokens"] == 5248
    assert row["alive"] and row["state"] == "paused"  # the live heartbeat's phase: it does not wait for ingest


def test_a_replica_that_syncs_while_the_command_is_sent_shows_the_operators_display_name(operator, run,
                                                                                         monkeypatch):
    """QA (issue 46): the record was saved after the XADD, so another replica's sync in between imported the command
    as a CLI one, named by its sender's login name, and the panel showed that until its next update."""
    from webapp.control import channel

    Profile.objects.update_or_create(user=operator.user, defaults={"display_name": "Olga Petrova"})
    real_send, seen = channel.send, []

    def send_then_another_replica_syncs(cmd):
        real_send(cmd)
        channel.sync([RUN])  # another replica, between the XADD and the end of this request
        seen.append(OperatorCommand.objects.select_related("user__profile").get(pk="race-0000001").as_json())

    monkeypatch.setattr(channel, "send", send_then_another_replica_syncs)
    resp = post(operator, id="race-0000001", command="pause", reason="look")
    assert resp.status_code == 202 and resp.json()["user"] == "Olga Petrova" and resp.json()["source"] == "web"
    [between] = seen
    assert (between["user"], between["source"]) == ("Olga Petrova", "web"), "the other replica's panel said so"
    recorded = OperatorCommand.objects.get(pk="race-0000001")
    assert recorded.user == operator.user and recorded.sent_entry and recorded.status == "sent"


def test_a_command_the_stream_never_got_is_recorded_as_not_sent_and_its_id_sends_it_later(operator, run,
                                                                                          fake_trainer, settings):
    landed = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there: Redis is away
    resp = post(operator, id="away-0000001", command="pause", reason="look")
    assert resp.status_code == 503 and "control stream" in resp.json()["error"]
    assert resp.json()["command"]["outcome"] == "unsent"
    settings.REDIS_URL = landed
    [row] = [c for c in operator.get(URL).json()["commands"] if c["id"] == "away-0000001"]
    assert row["outcome"] == "unsent" and "not sent" in row["detail"] and fake_trainer.sent() == []
    again = post(operator, id="away-0000001", command="pause", reason="look")
    assert again.status_code == 202 and again.json()["outcome"] == "sent" and again.json()["detail"] == ""
    [entry] = fake_trainer.sent()
    assert entry["id"] == "away-0000001" and OperatorCommand.objects.get(pk="away-0000001").sent_entry
    fake_trainer.ack("away-0000001", "applied", "paused", 41)
    assert outcomes(operator)["away-0000001"]["outcome"] == "applied"


def test_the_panel_script_copies_no_rule_of_its_own():
    js = (Path(__file__).resolve().parents[3] / "static/js/operate.js").read_text()
    assert "1e-6" not in js and "must sum to 1" not in js and "weightsArg" in js  # its rule: the served schema
