"""Device discovery: the devices, driver and health a careful SRE checks with nvidia-smi,
amd-smi/rocm-smi or lscpu, against the host's node class."""

from __future__ import annotations

from testinfra.host import Host

from fleetgate.smoke.session import SmokeSession, verdict


def test_devices_driver_and_health_match_the_class(host: Host, smoke: SmokeSession) -> None:
    result = smoke.check(host, "discovery")
    verdict(result)
    if result.probe_status == "ok" and result.backend in ("nvidia", "amd"):
        assert result.metrics["gpu_count"] == result.threshold["count"]
