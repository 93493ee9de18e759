"""The report's drain story per host, from the Slurm drain module's journaled results
(rollout/worker._compact keeps them; rollout/report_data.drain_stories tells them)."""

from __future__ import annotations

from typing import Any

from fleetgate.rollout.report_data import drain_stories
from fleetgate.rollout.worker import _compact

JOB = {"id": "41", "name": "train", "user": "ana"}


def slurm_event(host: str, res: dict[str, Any], *, failed: bool = False) -> dict[str, Any]:
    event = {"event": "runner_on_failed" if failed else "runner_on_ok",
             "event_data": {"host": host, "task": "Drain", "res": res,
                            "task_action": "fleetgate_slurm_node"}}
    compact = _compact(event)
    assert compact is not None
    return {"kind": "ansible", "host": host, "data": compact}


def test_drained_then_resumed_timed_out_and_held_each_read_as_what_happened() -> None:
    events = [
        slurm_event("h1", {"node": "h1", "drained_at": "2026-12-01T10:00:40Z", "waited_s": 38.5,
                           "jobs_at_start": [JOB], "reason": "fleetgate: r1 x.yml",
                           "drained_by_fleetgate": True, "stdout_lines": ["noise"]}),
        slurm_event("h1", {"node": "h1", "resumed": True, "resumed_at": "2026-12-01T10:02:00Z"}),
        slurm_event("h2", {"node": "h2", "timed_out": True, "waited_s": 10.0, "jobs": [JOB],
                           "resumed_at": "2026-12-01T10:00:12Z"}, failed=True),
        slurm_event("h3", {"node": "h3", "drained_at": "2026-12-01T10:03:00Z", "waited_s": 0.4,
                           "jobs_at_start": [], "reason": "fleetgate: r1 x.yml"}),
        # Not the drain module: no story.
        {"kind": "ansible", "host": "h4", "data": _compact(
            {"event": "runner_on_ok", "event_data": {"host": "h4", "task": "t", "res": {},
                                                     "task_action": "command"}})},
    ]
    assert "stdout_lines" not in events[0]["data"]["slurm"]
    stories = drain_stories(events)
    assert stories["h1"] == ["drained at 2026-12-01T10:00:40Z after waiting 38.5s on job 41 "
                             "'train' (ana)", "resumed at 2026-12-01T10:02:00Z"]
    assert stories["h2"] == ["drain timed out after 10.0s, still running: job 41 'train' "
                             "(ana); resumed at 2026-12-01T10:00:12Z"]
    assert stories["h3"][-1] == "held out of service: drained, reason 'fleetgate: r1 x.yml'"
    assert "h4" not in stories
