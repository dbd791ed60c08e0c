"""The zone and locale of the runs the MCP front door opens come from the agent (issue 33): an
admin sets them on the subject (UTC / en-US unless set); a run named in
``_meta["dev.toolops/run"]`` keeps its own."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from invocations_app.runs import run_create
from mcp_server.runs import mcp_run_get_or_open, run_rule
from tests.builders import make_subject

pytestmark = pytest.mark.django_db


def test_a_run_mcp_opens_is_in_the_agents_zone_and_locale():
    subject = make_subject()
    subject.timezone, subject.locale = "Asia/Shanghai", "zh-CN"
    subject.save()
    run = mcp_run_get_or_open(subject=subject, rule=run_rule(session_id="s-1", meta={}), trace=None)
    assert (run.timezone, run.locale) == ("Asia/Shanghai", "zh-CN")


def test_an_agent_nobody_set_runs_in_utc_en_us():
    run = mcp_run_get_or_open(subject=make_subject(), rule=run_rule(session_id=None, meta={}), trace=None)
    assert (run.timezone, run.locale) == ("UTC", "en-US")


def test_a_run_named_in_meta_keeps_its_own_zone():
    subject = make_subject()
    subject.timezone = "Asia/Shanghai"
    subject.save()
    named = run_create(subject=subject, budgets={}, timezone_name="Europe/Paris", locale="fr-FR", metadata={}, trace=None)
    run = mcp_run_get_or_open(subject=subject, rule=run_rule(session_id="s-2", meta={"dev.toolops/run": str(named.pk)}),
                              trace=None)
    assert run.pk == named.pk and (run.timezone, run.locale) == ("Europe/Paris", "fr-FR")


def test_an_admin_cannot_set_a_zone_that_is_not_iana():
    subject = make_subject()
    subject.timezone = "UTC+8"
    with pytest.raises(ValidationError):
        subject.full_clean()
