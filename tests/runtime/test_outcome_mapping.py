"""Outcome mapping cannot be crashed (issue 11 item 6): any status and any status map classify."""
from __future__ import annotations

import pytest

from toolops.decisions.execution import Commit, classify_status, outcome_for_status


@pytest.mark.parametrize("status,kind", [
    (200, "ok"), (204, "ok"), (302, "permanent"), (304, "permanent"), (100, "permanent"), (404, "permanent"),
    (409, "transient"), (422, "business_rejected"), (429, "rate_limited"), (500, "transient"), (599, "transient"),
    (600, "permanent"), (999, "permanent"), (0, "permanent"), (-1, "permanent"),
])
def test_it_classifies_every_status(status, kind):
    assert classify_status(status) == kind


@pytest.mark.parametrize("status_map", [{"200": "explode"}, {"2xx": None}, "not a dict", ["x"], {"200": 7}])
def test_it_falls_back_to_permanent_for_a_status_map_naming_no_known_class(status_map):
    assert classify_status(200, status_map) in ("ok", "permanent")
    commit, failure = outcome_for_status(status=200, side_effect_class="write_idempotent", status_map=status_map)
    assert (commit, failure) in ((Commit.COMMITTED, None), (Commit.NOT_COMMITTED, "permanent"))


@pytest.mark.parametrize("status", [True, None, "200", 200.0])
def test_it_treats_a_non_integer_status_as_permanent(status):
    assert classify_status(status) == "permanent"
