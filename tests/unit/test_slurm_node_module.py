"""The Slurm drain module (playbooks/library/fleetgate_slurm_node.py): its readers against
`scontrol show node -o` and `squeue` captured from the lab's real Slurm 22.05
(tests/fixtures/slurm/), and its decisions (drain, wait, give up, resume) against a scripted
scheduler. On a real slurmctld: tests/integration/test_slurm_drain.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO
from tests.unit.ansible_modules import ansible_module

mod = ansible_module("playbooks/library/fleetgate_slurm_node.py")
FIXTURES = REPO / "tests" / "fixtures" / "slurm"
REASON = "fleetgate: r2 examples/rollout/stamp-version.yml"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_show_node_fields_from_real_output() -> None:
    idle = mod.parse_node(fixture("show-node-idle.txt"))
    assert idle["NodeName"] == "lab-c02" and idle["State"] == "IDLE" and "Reason" not in idle
    # Values with '=' and with spaces stay whole.
    assert idle["CfgTRES"] == "cpu=1,mem=1M,billing=1"
    assert idle["OS"].startswith("Linux ") and "#1 SMP" in idle["OS"]
    draining = mod.parse_node(fixture("show-node-allocated-drain.txt"))
    assert draining["State"] == "ALLOCATED+DRAIN"
    assert draining["Reason"] == REASON  # Slurm's "[root@time]" stamp is not part of it


@pytest.mark.parametrize(("name", "held", "drained"), [
    ("show-node-idle.txt", False, False),
    ("show-node-allocated-drain.txt", True, False),  # a job still runs: DRAINING
    ("show-node-idle-drain.txt", True, True),
])
def test_drained_means_no_job_left_on_real_states(name: str, held: bool, drained: bool) -> None:
    state = mod.parse_node(fixture(name))["State"]
    assert mod.is_draining_or_drained(state) is held
    assert mod.is_drained(state) is drained


@pytest.mark.parametrize(("state", "drained"), [
    ("MIXED+DRAIN", False), ("IDLE+COMPLETING+DRAIN", False), ("DOWN+DRAIN", True),
    ("IDLE+DRAIN+NOT_RESPONDING", True), ("DRAINED", True), ("DRAINING", False),
    ("IDLE", False), ("ALLOCATED", False),
])
def test_drained_state_table(state: str, drained: bool) -> None:
    assert mod.is_drained(state) is drained


def test_jobs_from_real_squeue_output() -> None:
    jobs = mod.parse_jobs(fixture("squeue-node.txt"))
    assert jobs == [{"id": "2", "name": "hold-job", "user": "root"}]
    assert mod.describe_jobs(jobs) == "job 2 'hold-job' (root)"
    assert mod.describe_jobs([]) == "no job"


class Ended(Exception):
    def __init__(self, kind: str, result: dict[str, Any]):
        super().__init__(kind)
        self.kind, self.result = kind, result


class FakeModule:
    def exit_json(self, **result: Any) -> None:
        raise Ended("exit", result)

    def fail_json(self, **result: Any) -> None:
        raise Ended("fail", result)


class ScriptedSlurm:
    """A scheduler whose node goes through `states` (the last one repeats); records updates."""

    def __init__(self, states: list[str], reason: str = "", jobs: int = 1):
        self._states: Iterator[str] = iter(states)
        self.state, self.reason = states[0], reason
        self.updates: list[tuple[str, ...]] = []
        self._jobs = [{"id": str(40 + i), "name": "train", "user": "alice"} for i in range(jobs)]

    def node(self, name: str) -> dict[str, str]:
        self.state = next(self._states, self.state)
        return {"NodeName": name, "State": self.state,
                **({"Reason": self.reason} if self.reason else {})}

    def jobs(self, name: str) -> list[dict[str, str]]:
        return self._jobs

    def update(self, name: str, *settings: str) -> None:
        self.updates.append(settings)
        if "State=DRAIN" in settings:
            self.reason = settings[1].removeprefix("Reason=")

    def resume(self, name: str) -> str:
        self.update(name, "State=RESUME")
        self.reason = ""
        return "ALLOCATED"


def run(fn: Any, *args: Any) -> Ended:
    with pytest.raises(Ended) as got:
        fn(FakeModule(), *args)
    return got.value


def test_drain_sets_the_reason_and_waits_until_the_job_is_gone() -> None:
    slurm = ScriptedSlurm(["ALLOCATED", "ALLOCATED+DRAIN", "ALLOCATED+DRAIN", "IDLE+DRAIN"])
    end = run(mod.drain, slurm, "n1", REASON, 60, 0.01)
    assert end.kind == "exit" and end.result["changed"] is True
    assert slurm.updates == [("State=DRAIN", f"Reason={REASON}")]
    assert end.result["state"] == "IDLE+DRAIN" and end.result["drained_by_fleetgate"]
    assert end.result["jobs_at_start"][0]["id"] == "40" and end.result["drained_at"]


def test_drain_timeout_resumes_what_fleetgate_drained_and_names_the_jobs() -> None:
    slurm = ScriptedSlurm(["ALLOCATED", "ALLOCATED+DRAIN"], jobs=2)
    end = run(mod.drain, slurm, "n1", REASON, 1, 0.2)
    assert end.kind == "fail" and end.result["timed_out"]
    assert slurm.updates[-1] == ("State=RESUME",)
    msg = end.result["msg"]
    assert "timed out after 1s" in msg and "nothing applied" in msg
    assert "job 40 'train' (alice), job 41 'train' (alice)" in msg and "node resumed" in msg


def test_someone_elses_drain_is_waited_on_but_never_rewritten_or_resumed() -> None:
    slurm = ScriptedSlurm(["ALLOCATED+DRAIN"], reason="disk swap, ticket 7")
    end = run(mod.drain, slurm, "n1", REASON, 1, 0.2)
    assert end.kind == "fail" and slurm.updates == []
    assert "its owner drained it" in end.result["msg"] and "disk swap" in end.result["msg"]
    ok = run(mod.drain, ScriptedSlurm(["IDLE+DRAIN"], reason="disk swap"), "n1", REASON, 5, 0.1)
    assert ok.kind == "exit" and ok.result["changed"] is False
    assert ok.result["drained_by_fleetgate"] is False


def test_a_repeated_drain_of_our_own_node_issues_nothing_twice() -> None:
    # A drain re-run after a controller crash finds its own reason already set.
    slurm = ScriptedSlurm(["IDLE+DRAIN"], reason=REASON)
    end = run(mod.drain, slurm, "n1", REASON, 5, 0.1)
    assert end.kind == "exit" and slurm.updates == [] and end.result["drained_by_fleetgate"]


@pytest.mark.parametrize(("state", "reason", "resumed"), [
    ("IDLE+DRAIN", REASON, True),
    ("IDLE+DRAIN", "fleetgate: another-rollout examples/x.yml", False),
    ("IDLE+DRAIN", "bad DIMM", False),
    ("IDLE", "", False),
])
def test_resume_only_a_node_this_rollout_drained(state: str, reason: str, resumed: bool) -> None:
    slurm = ScriptedSlurm([state], reason=reason)
    end = run(mod.resume, slurm, "n1", REASON)
    assert end.kind == "exit" and end.result["resumed"] is resumed
    assert (slurm.updates == [("State=RESUME",)]) is resumed
