#!/usr/bin/python3
"""Build, compare and write fleetgate's node manifest (/etc/fleetgate/manifest.json)."""

from __future__ import annotations

import glob
import json
import os
import re
import tempfile
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleetgate_hostcmd import read_text, search_path, stdout_of
from ansible.module_utils.fleetgate_hostpkg import dkms_status, dpkg_versions, package_list_sha256
from ansible.module_utils.fleetgate_parsers import (
    NVIDIA_IDENTITY_QUERY,
    ParseError,
    cpu_model_name,
    fingerprint_fields,
    gpu_identities,
)

DOCUMENTATION = r"""
---
module: fleetgate_manifest
short_description: Record what a host runs against its node class, and report drift
description:
  - Reads what is really installed on the host (C(dpkg-query), C(dkms status), C(modinfo),
    the default boot kernel, the running kernel) beside what its fleetgate node class
    expects, fingerprints its accelerator, and lists every difference as drift.
  - In C(write) mode the manifest is written to O(path), atomically, and only when
    something other than C(updated_at) changed, so a repeated run reports no change.
  - In C(verify) mode nothing is written; the manifest and its drift are returned.
  - Runs on the target with its system Python and the standard library only. Every
    external command runs with a timeout; a missing tool gives C(null), never a failure.
version_added: "0.1.0"
author: fleetgate
options:
  class_name:
    description: Name of the node class the host belongs to.
    type: str
    required: true
  class_version:
    description: Version of the node class, recorded as C(class_version); C(null) when unknown.
    type: int
  userland:
    description: The class's userland pins.
    type: dict
    default: {}
    suboptions:
      blas:
        description:
          - The BLAS the C(libblas.so.3) alternative must select, C(openblas) or C(reference).
          - C(null), an empty string or the string C(None) (what C(include_role) makes of a
            null) mean the class pins no BLAS and the host is left alone.
        type: str
      cuda:
        description: CUDA userland version (not checked).
        type: str
      rocm:
        description: ROCm userland version (not checked).
        type: str
  kernel:
    description: The class's kernel pin.
    type: dict
    required: true
    suboptions:
      abi:
        description: Pinned kernel ABI, e.g. C(6.1.0-55-cloud-amd64).
        type: str
        required: true
      package_version:
        description: Exact Debian version of C(linux-image-ABI).
        type: str
        required: true
  driver:
    description: The class's GPU driver pin (all keys C(null) for vendor C(none)).
    type: dict
    default: {}
    suboptions:
      vendor:
        description: Driver vendor.
        type: str
        choices: [nvidia, amd, none]
        default: none
      branch:
        description: Driver branch.
        type: str
      version:
        description: Exact package version every driver package must be installed at.
        type: str
      flavour:
        description: Kernel module flavour, C(open) or C(proprietary); C(null) for vendor C(none).
        type: str
      packages:
        description: Driver packages.
        type: list
        elements: str
        default: []
  dkms:
    description: DKMS modules that must be built and installed for the pinned kernel.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: DKMS module name (also the kernel module passed to C(modinfo)).
        type: str
        required: true
      version:
        description: DKMS module version.
        type: str
        required: true
      package:
        description: Debian package that carries the module (not recorded).
        type: str
  runtime:
    description: The class's container runtime and GPU toolkit pin.
    type: dict
    default: {}
    suboptions:
      engine:
        description: Container engine.
        type: str
        choices: [containerd, docker, podman, none]
        default: none
      version:
        description: Exact package version of the engine.
        type: str
      gpu_toolkit:
        description: GPU container toolkit package.
        type: str
        choices: [nvidia-container-toolkit, amd-container-toolkit, none]
        default: none
      gpu_toolkit_version:
        description: Exact package version of the GPU toolkit.
        type: str
      cdi:
        description: Whether devices are exposed through CDI.
        type: bool
        default: false
  accelerator:
    description: The class's accelerator.
    type: dict
    default: {}
    suboptions:
      vendor:
        description: Accelerator vendor.
        type: str
        choices: [nvidia, amd, none]
        default: none
      model:
        description: Device model.
        type: str
      count:
        description: Devices per host.
        type: int
        default: 0
      pci_ids:
        description: PCI vendor:device IDs.
        type: list
        elements: str
        default: []
      compute_capability:
        description: CUDA compute capability or AMD gfx target.
        type: str
      backend:
        description: Smoke backend; selects how the fingerprint is read.
        type: str
        choices: [nvidia, amd, cpu, none]
        default: none
  engine_packages:
    description: Debian package that carries each container engine.
    type: dict
    default: {containerd: containerd, docker: docker.io, podman: podman}
  mode:
    description: C(write) records the manifest; C(verify) only computes and returns it.
    type: str
    choices: [write, verify]
    default: write
  path:
    description: Where the manifest lives.
    type: path
    default: /etc/fleetgate/manifest.json
  kernel_state_path:
    description: kernel_pin's state file, read for the previous kernel.
    type: path
    default: /etc/fleetgate/kernel.json
  check_running_kernel:
    description:
      - Count a running kernel other than the pin as drift. Turn off where the kernel is
        not the host's own (containers) or before the reboot into a new pin.
    type: bool
    default: true
  command_timeout:
    description: Seconds each external command may run.
    type: int
    default: 30
notes:
  - Supports check mode and diff mode; in check mode nothing is written.
  - "C(package_list_sha256) equals
    C(dpkg-query -W -f '${Package}=${Version}\\n' | LC_ALL=C sort | sha256sum)."
"""

EXAMPLES = r"""
- name: Record the manifest of a host of class lab-cpu
  fleetgate_manifest:
    class_name: lab-cpu
    kernel: {abi: 6.1.0-55-cloud-amd64, package_version: 6.1.192-1}
    accelerator: {vendor: none, model: cpu, count: 0, backend: cpu}
    check_running_kernel: false

- name: Report drift without writing anything
  fleetgate_manifest:
    mode: verify
    class_name: "{{ fleetgate_class }}"
    kernel:
      abi: "{{ fleetgate_kernel_abi }}"
      package_version: "{{ fleetgate_kernel_package_version }}"
    driver:
      vendor: "{{ fleetgate_driver_vendor }}"
      branch: "{{ fleetgate_driver_branch }}"
      version: "{{ fleetgate_driver_version }}"
      flavour: "{{ fleetgate_driver_flavour }}"
      packages: "{{ fleetgate_driver_packages }}"
    dkms: "{{ fleetgate_dkms_modules }}"
    runtime: "{{ fleetgate_runtime }}"
    accelerator: "{{ fleetgate_accelerator }}"
  register: manifest
"""

RETURN = r"""
manifest:
  description: The manifest (schema 1) as written, or as it would be written.
  returned: always
  type: dict
  contains:
    schema:
      description: Manifest schema version.
      type: int
      sample: 1
    class:
      description: Node class name.
      type: str
    expected:
      description: Kernel, driver, dkms, runtime and accelerator as the class pins them.
      type: dict
    verified:
      description: >-
        What the host has: kernel (abi, package_version, default_boot, running, previous),
        packages (driver and runtime package to installed version or null), dkms (parsed
        C(dkms status)), modinfo (class module to C(modinfo -k ABI -F version) or null).
      type: dict
    package_list_sha256:
      description: SHA-256 of the sorted C(Package=Version) lines of every known package.
      type: str
    fingerprint:
      description: >-
        backend, device_model, pci_ids, compute_capability, driver, runtime, kernel,
        cpu_model; the key for engine and compile caches.
      type: dict
    drift:
      description: One entry per difference from the class, each with field, expected, actual.
      type: list
      elements: dict
    updated_at:
      description: When the content last changed (ISO 8601, UTC).
      type: str
drift:
  description: Same as manifest.drift.
  returned: always
  type: list
  elements: dict
  sample:
    - field: verified.kernel.default_boot
      expected: 6.1.0-55-cloud-amd64
      actual: 6.1.0-54-cloud-amd64
drift_summary:
  description: The drift on one line, field by field with expected and actual values.
  returned: always
  type: str
  sample: 'verified.kernel.default_boot (expected "6.1.0-55-cloud-amd64", actual null)'
path:
  description: The manifest path.
  returned: always
  type: str
written:
  description: Whether the file was (or in check mode would be) rewritten.
  returned: always
  type: bool
"""

SCHEMA = 1
Json = dict[str, Any]


def _str(**kw: object) -> dict[str, object]:
    return {"type": "str", **kw}


ARGUMENT_SPEC: dict[str, dict[str, object]] = {
    "class_name": _str(required=True),
    "class_version": {"type": "int"},
    "userland": {"type": "dict", "default": {}, "options": {
        # No choices here: a class without a BLAS pin reaches the module as null, or as the
        # string "None" when include_role templates the dict; expected_blas() sorts it out.
        "blas": _str(),
        "cuda": _str(),
        "rocm": _str(),
    }},
    "kernel": {"type": "dict", "required": True, "options": {
        "abi": _str(required=True),
        "package_version": _str(required=True),
    }},
    "driver": {"type": "dict", "default": {}, "options": {
        "vendor": _str(choices=["nvidia", "amd", "none"], default="none"),
        "branch": _str(),
        "version": _str(),
        "flavour": _str(),  # no choices: null (vendor none) must pass
        "packages": {"type": "list", "elements": "str", "default": []},
    }},
    "dkms": {"type": "list", "elements": "dict", "default": [], "options": {
        "name": _str(required=True),
        "version": _str(required=True),
        "package": _str(),
    }},
    "runtime": {"type": "dict", "default": {}, "options": {
        "engine": _str(choices=["containerd", "docker", "podman", "none"], default="none"),
        "version": _str(),
        "gpu_toolkit": _str(choices=["nvidia-container-toolkit", "amd-container-toolkit",
                                     "none"], default="none"),
        "gpu_toolkit_version": _str(),
        "cdi": {"type": "bool", "default": False},
    }},
    "accelerator": {"type": "dict", "default": {}, "options": {
        "vendor": _str(choices=["nvidia", "amd", "none"], default="none"),
        "model": _str(),
        "count": {"type": "int", "default": 0},
        "pci_ids": {"type": "list", "elements": "str", "default": []},
        "compute_capability": _str(),
        "backend": _str(choices=["nvidia", "amd", "cpu", "none"], default="none"),
    }},
    "engine_packages": {"type": "dict", "default": {
        "containerd": "containerd", "docker": "docker.io", "podman": "podman"}},
    "mode": _str(choices=["write", "verify"], default="write"),
    "path": {"type": "path", "default": "/etc/fleetgate/manifest.json"},
    "kernel_state_path": {"type": "path", "default": "/etc/fleetgate/kernel.json"},
    "check_running_kernel": {"type": "bool", "default": True},
    "command_timeout": {"type": "int", "default": 30},
}

# saved_entry as a title ("...>Debian GNU/Linux, with Linux ABI") or as a menuentry id
# ("gnulinux-advanced-UUID>gnulinux-ABI-advanced-UUID").
GRUB_ENTRY_RES = (
    re.compile(r"with Linux (\S+?)(?: \(.*\))?$"),
    re.compile(r"gnulinux-([^>\s]+?)-(?:advanced|recovery)-[0-9a-fA-F-]+$"),
)
class Host:
    """Read-only access to the target; every command has a deadline and may be absent."""

    def __init__(self, timeout: int) -> None:
        self.timeout = timeout
        self.path = search_path()

    def run(self, argv: list[str]) -> str | None:
        """stdout of the command, or None when the tool is missing, fails or times out."""
        out: str | None = stdout_of(argv, self.timeout, path=self.path)
        return out


def default_boot(host: Host) -> str | None:
    """ABI that boots by default: GRUB's saved entry where GRUB is used, else /vmlinuz."""
    if os.path.exists("/boot/grub/grub.cfg"):
        env = host.run(["grub-editenv", "list"])
        if env is None:
            env = read_text("/boot/grub/grubenv")
        for line in (env or "").splitlines():
            if line.startswith("saved_entry="):
                entry = line.split("=", 1)[1].strip()
                for pattern in GRUB_ENTRY_RES:
                    m = pattern.search(entry)
                    if m:
                        return m.group(1)
    try:
        target = os.readlink("/vmlinuz")
    except OSError:
        return None
    name = os.path.basename(target)
    return name[len("vmlinuz-"):] if name.startswith("vmlinuz-") else None


def previous_kernel(path: str) -> str | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        value = json.loads(text).get("previous")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def dkms_entries(host: Host) -> list[dict[str, str | None]]:
    """`dkms status` as the manifest records it: name, version, kernel, arch, status."""
    _got, entries = dkms_status(host.timeout)
    return [{"name": e["name"], "version": e["version"], "kernel": e["kernel"],
             "arch": e["arch"], "status": e["state"]} for e in entries]


def modinfo_versions(host: Host, abi: str, modules: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in modules:
        text = host.run(["modinfo", "-k", abi, "-F", "version", name])
        value = (text or "").strip().splitlines()
        out[name] = value[0] if value else None
    return out


def cpu_model() -> str | None:
    name: str | None = cpu_model_name(read_text("/proc/cpuinfo") or "")
    return name


def _devices(kind: str, text: str | None) -> dict[str, object] | None:
    """The fingerprint's device fields from one tool's output; None when it said nothing."""
    if not text:
        return None
    try:
        devices = gpu_identities(kind, text)
    except ParseError:
        return None
    return fingerprint_fields(devices) if devices else None


def fingerprint(host: Host, backend: str, runtime: str | None) -> dict[str, object]:
    fp: dict[str, object] = {
        "backend": backend, "device_model": None, "pci_ids": [], "compute_capability": None,
        "driver": None, "runtime": runtime, "kernel": os.uname().release,
        "cpu_model": cpu_model(),
    }
    found: dict[str, object] | None = None
    if backend == "nvidia":
        found = _devices("nvidia-smi-csv",
                         host.run(["nvidia-smi", NVIDIA_IDENTITY_QUERY, "--format=csv"]))
    elif backend == "amd":
        found = _devices("amd-smi", host.run(["amd-smi", "static", "--asic", "--driver",
                                              "--json"]))
        if not found or not found.get("device_model"):
            found = _devices("rocm-smi", host.run(["rocm-smi", "--showproductname", "--showid",
                                                   "--showdriverversion", "--json"])) or found
    elif backend == "cpu":
        fp["device_model"] = fp["cpu_model"]
    if found:
        fp.update(found)
    return fp


def runtime_packages(runtime: Json, engine_packages: dict[str, str]) -> dict[str, str | None]:
    """Runtime package -> the version the class pins."""
    pins: dict[str, str | None] = {}
    engine = runtime.get("engine") or "none"
    if engine != "none":
        pins[engine_packages.get(engine, engine)] = runtime.get("version")
    toolkit = runtime.get("gpu_toolkit") or "none"
    if toolkit != "none":
        pins[toolkit] = runtime.get("gpu_toolkit_version")
    return pins


def expected_blas(module: AnsibleModule) -> str | None:
    value = (module.params["userland"] or {}).get("blas")
    if value in (None, "", "None", "none", "null"):
        return None
    if value not in ("openblas", "reference"):
        module.fail_json(msg=f"userland.blas must be openblas or reference, got {value!r}")
    return str(value)


def blas_provider() -> str | None:
    """openblas, reference, or the raw target of the libblas.so.3 alternative (None: none)."""
    links = sorted(glob.glob("/etc/alternatives/libblas.so.3-*"))
    target = os.path.realpath(links[0]) if links else ""
    if not target or not os.path.exists(target):
        return None
    if "openblas" in target:
        return "openblas"
    # The reference BLAS resolves to its versioned file, e.g. blas/libblas.so.3.11.0.
    if re.search(r"/blas/libblas\.so\.3(\.[0-9.]+)?$", target):
        return "reference"
    return target


def compute_drift(expected: Json, verified: Json, pins: dict[str, str | None],
                  check_running: bool) -> list[dict[str, object]]:
    drift: list[dict[str, object]] = []

    def add(field: str, want: object, have: object) -> None:
        drift.append({"field": field, "expected": want, "actual": have})

    want_blas = (expected.get("userland") or {}).get("blas")
    if want_blas and verified.get("userland", {}).get("blas") != want_blas:
        add("verified.userland.blas", want_blas, verified["userland"]["blas"])

    abi = expected["kernel"]["abi"]
    kernel = verified["kernel"]
    if kernel["package_version"] != expected["kernel"]["package_version"]:
        add("verified.kernel.package_version", expected["kernel"]["package_version"],
            kernel["package_version"])
    if kernel["default_boot"] != abi:
        add("verified.kernel.default_boot", abi, kernel["default_boot"])
    if check_running and kernel["running"] != abi:
        add("verified.kernel.running", abi, kernel["running"])
    for pkg, want in pins.items():
        have = verified["packages"].get(pkg)
        if have is None or have != want:
            add(f"verified.packages.{pkg}", want, have)
    for mod in expected["dkms"]:
        wanted = {"name": mod["name"], "version": mod["version"], "kernel": abi,
                  "status": "installed"}
        entries = [e for e in verified["dkms"] if e["name"] == mod["name"]
                   and e["kernel"] == abi]
        ok = [e for e in entries if e["version"] == mod["version"]
              and e["status"] == "installed"]
        if not ok:
            found = {k: entries[0][k] for k in wanted} if entries else None
            add(f"verified.dkms.{mod['name']}", wanted, found)
    return drift


def summarize(drift: list[dict[str, object]]) -> str:
    return "; ".join(
        f"{d['field']} (expected {json.dumps(d['expected'], sort_keys=True)}, "
        f"actual {json.dumps(d['actual'], sort_keys=True)})"
        for d in drift
    )


def build(module: AnsibleModule) -> Json:
    p = module.params
    host = Host(p["command_timeout"])
    abi = p["kernel"]["abi"]
    driver = p["driver"] or {}
    runtime = p["runtime"] or {}
    accelerator = p["accelerator"] or {}
    expected = {
        "kernel": {"abi": abi, "package_version": p["kernel"]["package_version"]},
        "driver": {k: driver.get(k) for k in ("vendor", "branch", "version", "flavour",
                                              "packages")},
        "dkms": [{"name": m["name"], "version": m["version"]} for m in p["dkms"]],
        "runtime": runtime,
        "accelerator": accelerator,
        "userland": {"blas": expected_blas(module)},
    }
    pins: dict[str, str | None] = dict.fromkeys(driver.get("packages") or [],
                                                driver.get("version"))
    runtime_pins = runtime_packages(runtime, p["engine_packages"])
    pins.update(runtime_pins)

    image = f"linux-image-{abi}"
    versions = dpkg_versions(sorted({image, *pins}), host.timeout)
    verified = {
        "kernel": {
            "abi": abi if versions[image] is not None else None,
            "package_version": versions[image],
            "default_boot": default_boot(host),
            "running": os.uname().release,
            "previous": previous_kernel(p["kernel_state_path"]),
        },
        "packages": {pkg: versions[pkg] for pkg in pins},
        "dkms": dkms_entries(host),
        "modinfo": modinfo_versions(host, abi, [m["name"] for m in p["dkms"]]),
        "userland": {"blas": blas_provider()},
    }
    installed_runtime = [f"{pkg}={versions[pkg]}" for pkg in runtime_pins if versions[pkg]]
    manifest = {
        "schema": SCHEMA,
        "class": p["class_name"],
        "class_version": p["class_version"],
        "expected": expected,
        "verified": verified,
        "package_list_sha256": package_list_sha256(host.timeout),
        "fingerprint": fingerprint(host, accelerator.get("backend") or "none",
                                   " ".join(installed_runtime) or None),
        "drift": compute_drift(expected, verified, pins, p["check_running_kernel"]),
        "updated_at": None,
    }
    return manifest


def load_existing(path: str) -> Json | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def same_content(a: Json | None, b: Json) -> bool:
    if a is None:
        return False
    strip = {k: v for k, v in a.items() if k != "updated_at"}
    # Round-trip through JSON so tuples and lists compare alike.
    new = json.loads(json.dumps({k: v for k, v in b.items() if k != "updated_at"}))
    return bool(strip == new)


def write_atomically(module: AnsibleModule, path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o755)
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        module.atomic_move(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    path = module.params["path"]
    manifest = build(module)
    existing = load_existing(path)
    unchanged = same_content(existing, manifest)
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    manifest["updated_at"] = (existing or {}).get("updated_at") if unchanged else now

    result: dict[str, object] = {"changed": False, "path": path, "written": False,
                                 "manifest": manifest, "drift": manifest["drift"],
                                 "drift_summary": summarize(manifest["drift"])}
    if module.params["mode"] == "write":
        if not unchanged:
            text = json.dumps(manifest, indent=2) + "\n"
            result["changed"] = result["written"] = True
            if module._diff:
                before = json.dumps(existing, indent=2) + "\n" if existing else ""
                result["diff"] = {"before": before, "after": text,
                                  "before_header": path, "after_header": path}
            if not module.check_mode:
                write_atomically(module, path, text)
        if os.path.exists(path):
            result["changed"] = module.set_mode_if_different(
                path, "0644", bool(result["changed"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
