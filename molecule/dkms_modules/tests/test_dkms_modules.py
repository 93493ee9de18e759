"""dkms_modules on a real lab host: every class module installed for the pinned kernel."""

from __future__ import annotations

from testinfra.host import Host

from fleetgate.spec.schema import NodeClass


def test_every_class_module_installed_for_the_pin(host: Host, node_class: NodeClass) -> None:
    assert node_class.dkms, "the scenario's class must list DKMS modules"
    status = host.check_output("dkms status")
    for m in node_class.dkms:
        assert f"{m.name}/{m.version}, {node_class.kernel.abi}, x86_64: installed" in status


def test_module_file_is_in_the_pinned_kernel_tree(host: Host, node_class: NodeClass) -> None:
    # MODULE_VERSION inside the .ko need not equal the DKMS package version (vpoll: 0.01 vs
    # 0.1), so check where the module that modprobe would load comes from.
    for m in node_class.dkms:
        path = host.check_output("modinfo -k %s -F filename %s", node_class.kernel.abi, m.name)
        assert path.startswith(f"/lib/modules/{node_class.kernel.abi}/updates/dkms/{m.name}.ko")
