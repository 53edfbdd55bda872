"""Schema-driven fuzzing: schemathesis generates requests for every operation of /api/schema/ and sends them to
a live server; no answer may be a 5xx, and every answer must match the schema (status code, content type, body).
Bounded: OBS_FUZZ_EXAMPLES examples per operation (default 5) plus the schema's explicit examples."""

from __future__ import annotations

import copy
import math
import os

import pytest
import requests
import schemathesis
from django.db import transaction
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                               status_code_conformance)

from webapp.metrics import storage
from webapp.metrics.models import Series
from webapp.publicapi import openapi
from webapp.runs.models import Run, RunEvent

EXAMPLES = int(os.environ.get("OBS_FUZZ_EXAMPLES", "5"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def fuzz_run(transactional_db):
    """The run the schema's examples name (api-fuzz-run), with a series, events and an anomaly."""
    from webapp.anomalies.models import Anomaly

    run = Run.objects.create(id="api-fuzz-run", name="fuzz", state="stopped", last_step=199)
    s = Series.objects.create(run=run, name="train/loss")
    with transaction.atomic():
        storage.bulk_load(s.id, [(i, math.nan if i == 7 else 1.0 / (i + 1)) for i in range(200)])
    for i in range(3):
        RunEvent.objects.create(run=run, kind="event", name=f"e{i}", step=i)
    Anomaly.objects.create(run=run, key="loss_spike train/loss 10", kind="loss_spike", metric="train/loss",
                           start_step=10, peak_step=10, detected_step=10, severity="critical", score=2.0)
    return run


def _fuzz(document: dict, base: str, only: str | None = None) -> tuple[int, list[int], list[str]]:
    """(operations tested, statuses seen, failures) of fuzzing `document`'s operations against `base`."""
    schema = schemathesis.openapi.from_dict(document)
    session = requests.Session()
    failures, statuses = [], []
    tested = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if only and operation.label != only:
            continue

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def fuzz(case):
            statuses.append(case.call_and_validate(base_url=base, session=session, checks=CHECKS).status_code)

        try:
            fuzz()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001  (schemathesis raises failure groups; collect every one)
            failures.append(f"{operation.label}: {str(e)[:1500]}")
        tested += 1
    return tested, statuses, failures


def test_the_live_api_conforms_to_its_schema_and_never_answers_5xx(live_server, fuzz_run):
    tested, statuses, failures = _fuzz(openapi.document(), live_server.url + "/api/v1")
    print(f"anonymous fuzz: {tested} operations, {len(statuses)} examples")
    assert not failures, "\n\n".join(failures)
    assert tested >= 30 and statuses.count(200) >= 12  # the explicit examples reach real data


def test_the_fuzzer_catches_an_answer_that_breaks_the_schema(live_server, fuzz_run):
    doc = copy.deepcopy(openapi.document())
    ok = doc["paths"]["/runs/{run_id}/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    ok["required"].append("no_such_key")
    _, _, failures = _fuzz(doc, live_server.url + "/api/v1", only="GET /runs/{run_id}/")
    assert failures and "no_such_key" in failures[0]
