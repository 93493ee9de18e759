"""Inference: the built-in model's output checksum, its cold start and latency."""

from __future__ import annotations

from testinfra.host import Host

from fleetgate.smoke.session import SmokeSession, verdict


def test_model_answers_right_and_in_time(host: Host, smoke: SmokeSession) -> None:
    result = smoke.check(host, "inference")
    verdict(result)
    if result.probe_status == "ok":
        assert result.metrics["deterministic"] is True
