"""Driver stack: the running kernel is the pin, every class DKMS module is installed for it,
and the container runtime reaches the devices."""

from __future__ import annotations

from testinfra.host import Host

from fleetgate.smoke.session import SmokeSession, verdict


def test_kernel_dkms_and_runtime_match_the_class(host: Host, smoke: SmokeSession) -> None:
    result = smoke.check(host, "stack")
    verdict(result)
