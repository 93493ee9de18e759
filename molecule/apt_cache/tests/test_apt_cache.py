"""apt_cache on a real lab host: emptied lists are refreshed, and apt resolves packages again."""

from __future__ import annotations

from testinfra.host import Host


def test_package_lists_are_back(host: Host) -> None:
    lists = host.check_output("find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*'")
    assert lists.split(), "no Packages lists after the refresh"


def test_apt_knows_the_archive(host: Host) -> None:
    # A candidate needs the lists; with them emptied apt-cache policy prints "(none)".
    policy = host.check_output("apt-cache policy libc6")
    candidate = next(line for line in policy.splitlines() if "Candidate:" in line)
    assert "(none)" not in candidate, policy
