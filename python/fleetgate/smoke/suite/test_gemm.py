"""GEMM: TFLOPS at the class dtype and size, a correct product, above the floor."""

from __future__ import annotations

from testinfra.host import Host

from fleetgate.smoke.session import SmokeSession, verdict


def test_gemm_is_correct_and_fast_enough(host: Host, smoke: SmokeSession) -> None:
    result = smoke.check(host, "gemm")
    verdict(result)
    if result.probe_status == "ok":
        assert result.metrics["correct"] is True
        assert result.metrics["tflops"] > 0
