"""gpu_driver on a real lab host: exact driver installed, pinned, held, built by DKMS."""

from __future__ import annotations

import re

import pytest
from testinfra.host import Host

from fleetgate.spec.schema import DkmsModule, NodeClass

# `dkms status` (dkms 3.x): "nvidia-current/535.261.03, 6.1.0-55-amd64, x86_64: installed"
DKMS_STATUS_RE = re.compile(
    r"^(?P<name>[^/,\s]+)/(?P<version>[^,\s]+), (?P<kernel>[^,\s]+), (?P<arch>[^:\s]+): "
    r"(?P<state>[a-z-]+)(?P<rest>.*)$"
)


def driver_modules(nc: NodeClass) -> list[DkmsModule]:
    """The class's DKMS modules that come with the driver packages."""
    return [m for m in nc.dkms if m.package in nc.driver.packages]


def dkms_status(host: Host) -> list[dict[str, str]]:
    out = host.check_output("dkms status")
    return [m.groupdict() for m in map(DKMS_STATUS_RE.match, out.splitlines()) if m]


def test_host_runs_an_nvidia_class(node_class: NodeClass) -> None:
    # The scenario runs its lab host as this class; without it the rest would test nothing.
    assert node_class.driver.vendor == "nvidia"
    assert node_class.driver.source.kind == "debian-non-free"
    assert driver_modules(node_class), "the class lists no DKMS module for its driver"


def test_driver_packages_installed_at_exact_version(host: Host, node_class: NodeClass) -> None:
    for name in node_class.driver.packages:
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == node_class.driver.version, name


def test_driver_packages_are_held(host: Host, node_class: NodeClass) -> None:
    for name in node_class.driver.packages:
        status = host.check_output("dpkg-query -W -f='${Status}' %s", name)
        assert status.split()[0] == "hold", (name, status)


def test_driver_packages_are_preferred(host: Host, node_class: NodeClass) -> None:
    pref = host.file("/etc/apt/preferences.d/fleetgate-gpu-driver.pref").content_string
    assert f"Pin: version {node_class.driver.version}" in pref
    assert "Pin-Priority: 1001" in pref
    for name in node_class.driver.packages:
        policy = host.check_output("apt-cache policy %s", name)
        assert f"{node_class.driver.version} 1001" in policy, policy


def test_driver_source_comes_from_the_class(host: Host, node_class: NodeClass) -> None:
    src = node_class.driver.source
    sources = host.file("/etc/apt/sources.list.d/fleetgate-nvidia.sources").content_string
    assert f"URIs: {src.url}" in sources
    assert f"Suites: {src.suite}" in sources
    assert f"Components: {' '.join(src.components)}" in sources
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in sources


def test_no_recommends_pulled_in(host: Host) -> None:
    # nvidia-driver recommends nvidia-settings (and with it GTK); install_recommends is off.
    assert not host.package("nvidia-settings").is_installed


def test_nouveau_is_blacklisted(host: Host) -> None:
    conf = host.file("/etc/modprobe.d/fleetgate-blacklist-nouveau.conf")
    lines = [ln.strip() for ln in conf.content_string.splitlines()]
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_every_initramfs_holds_the_blacklist(host: Host) -> None:
    # The blacklist acts at boot only from inside the initramfs: the driver install's own
    # rebuild, or the role's handler for an image older than the blacklist, must have put it
    # there. A container host without initramfs-tools has no initramfs to check.
    if not host.exists("lsinitramfs"):
        pytest.skip("no initramfs-tools on this host")
    images = host.check_output("find /boot -maxdepth 1 -name 'initrd.img-*'").split()
    assert images, "initramfs-tools is installed but /boot has no initramfs"
    for image in images:
        listed = host.check_output(f"lsinitramfs {image}").splitlines()
        assert "etc/modprobe.d/fleetgate-blacklist-nouveau.conf" in listed, image


def test_dkms_installed_driver_module_for_pinned_kernel(
    host: Host, node_class: NodeClass
) -> None:
    abi = node_class.kernel.abi
    status = dkms_status(host)
    for module in driver_modules(node_class):
        rows = [r for r in status
                if (r["name"], r["version"], r["kernel"]) == (module.name, module.version, abi)]
        assert rows, f"dkms status has no {module.name}/{module.version} for {abi}: {status}"
        assert rows[0]["state"] == "installed" and not rows[0]["rest"].strip(), rows[0]


def test_driver_module_file_built_for_pinned_kernel(host: Host, node_class: NodeClass) -> None:
    abi = node_class.kernel.abi
    for module in driver_modules(node_class):
        found = [f"/lib/modules/{abi}/updates/dkms/{module.name}.ko{ext}"
                 for ext in ("", ".xz", ".zst") if
                 host.file(f"/lib/modules/{abi}/updates/dkms/{module.name}.ko{ext}").is_file]
        assert found, f"no {module.name}.ko under /lib/modules/{abi}/updates/dkms/"
        vermagic = host.check_output("modinfo -F vermagic %s", found[0])
        assert vermagic.split()[0] == abi, vermagic


def test_driver_did_not_change_the_kernel(host: Host, node_class: NodeClass) -> None:
    abi_number = re.match(r"\d+\.\d+\.\d+-\d+", node_class.kernel.abi)  # -> 6.1.0-55
    assert abi_number
    rows = host.check_output("dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' "
                             "'linux-image-[0-9]*' 'linux-headers-[0-9]*'").splitlines()
    pkgs = [row.split()[-1] for row in rows if row.startswith("ii ")]
    assert pkgs
    assert all(p.split("-", 2)[2].startswith(f"{abi_number[0]}-") for p in pkgs), pkgs
    headers = host.package(f"linux-headers-{node_class.kernel.abi}")
    assert headers.version == node_class.kernel.package_version


def test_persistence_daemon_enabled(host: Host, node_class: NodeClass) -> None:
    if not node_class.driver.persistence:
        pytest.skip("the class does not ask for the persistence daemon")
    assert host.package("nvidia-persistenced").is_installed
    link = host.file("/etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")
    assert link.is_symlink
    assert link.linked_to.endswith("/systemd/system/nvidia-persistenced.service")
