"""A plan's drain options: the section, its timeout, `drain: none`, and the warning `rollout
plan` gives a plan that would leave failed hosts in service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.rollout.plan import (
    NO_DRAIN_WARNING,
    RolloutPlan,
    drain_of,
    drain_warnings,
    load_plan,
)
from tests.conftest import fleetgate
from tests.fixtures.rollout.plans import minimal_plan

BASE = minimal_plan("drain-unit", "inventory.yml")


def plan(**over: Any) -> RolloutPlan:
    return RolloutPlan.model_validate({**BASE, **over})


def test_drain_section_defaults_and_timeout() -> None:
    d = drain_of(plan(drain={}))
    assert d is not None and d.timeout_s == 600 and d.drain_playbook == "playbooks/drain.yml"
    d = drain_of(plan(drain={"timeout_s": 10}))
    assert d is not None and d.timeout_s == 10
    assert drain_of(plan()) is None
    assert drain_of(plan(drain="none")) is None


def test_only_a_plan_without_any_drain_answer_is_warned_about() -> None:
    assert drain_warnings(plan().drain) == [NO_DRAIN_WARNING]
    assert "failed host stays in service" in NO_DRAIN_WARNING
    assert drain_warnings(plan(drain="none").drain) == []
    assert drain_warnings(plan(drain={}).drain) == []


@pytest.mark.parametrize(("drain", "needle"), [
    ({"timeout_s": 0}, "greater than or equal to 1"),
    ({"timeout_s": "600"}, "drain"),  # strict: a quoted number is not seconds
    ({"timeout_s": 8 * 86400}, "less than or equal to"),
    ({"timeot_s": 60}, "unknown key"),
    ("nothing", "drain"),
    ({"drain_playbook": "/tmp/x.yml"}, "drain"),
])
def test_bad_drain_options_are_bad_input_naming_the_field(
        tmp_path: Path, drain: Any, needle: str) -> None:
    p = tmp_path / "plan.yml"
    p.write_text(yaml.safe_dump({**BASE, "drain": drain}))
    with pytest.raises(BadInput) as got:
        load_plan(p)
    line = got.value.one_line()
    assert str(p) in line and "drain" in line and needle in line, line


def _site(tmp_path: Path, drain: Any = None) -> Path:
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {
        "hosts": {"gpu-1": {"fleetgate_class": "lab-cpu"}, "gpu-2": {"fleetgate_class": "lab-cpu"}},
        "children": {"pool_canary": {"hosts": {"gpu-1": None}},
                     "pool_wave1": {"hosts": {"gpu-2": None}}}}}))
    doc = {**BASE, **({"drain": drain} if drain is not None else {})}
    path = tmp_path / "plan.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(("drain", "warned"), [(None, True), ("none", False)])
def test_rollout_plan_warns_that_failed_hosts_stay_in_service(
        tmp_path: Path, drain: Any, warned: bool) -> None:
    env = {"FLEETGATE_STATE_DIR": str(tmp_path / "state")}
    proc = fleetgate("rollout", "plan", str(_site(tmp_path, drain)), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("warning: the plan has no drain section" in " ".join(proc.stdout.split())) is warned


def test_rollout_plan_json_carries_the_warning(tmp_path: Path) -> None:
    env = {"FLEETGATE_STATE_DIR": str(tmp_path / "state")}
    proc = fleetgate("rollout", "plan", str(_site(tmp_path)), "-o", "json", env=env)
    assert json.loads(proc.stdout)["warnings"] == [NO_DRAIN_WARNING]
