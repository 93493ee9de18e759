"""Comms: an all-reduce that sums correctly, with its algbw and busbw above the floor."""

from __future__ import annotations

from testinfra.host import Host

from fleetgate.smoke.session import SmokeSession, verdict


def test_all_reduce_is_correct_and_fast_enough(host: Host, smoke: SmokeSession) -> None:
    result = smoke.check(host, "comms")
    verdict(result)
    if result.probe_status == "ok" and result.metrics.get("ranks", 0) > 1:
        assert result.metrics["correct"] is True
