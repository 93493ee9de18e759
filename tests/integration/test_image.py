"""Golden images, built for real: Packer 1.6.6's docker builder against podman's API, running
playbooks/golden.yml and the in-image gate (node_manifest verify) inside the build container.

- lab-cpu and lab-vm are built once per module; their manifests must show the class's pins
  verified inside the image (kernel ABI installed and the default boot; vpoll installed for it).
- Container hosts start from the lab-cpu image. (The lab-vm rootfs booting under qemu TCG
  with the kernel from its own /boot is test_kernel_update.py's first test: its VM is the
  lab-vm image's host.)
- A class whose vendored DKMS module cannot build fails its build, names the module, and
  leaves no image directory; bad input is refused before Packer starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetgate.image.manifest import node_part, package_list_sha256
from fleetgate.image.provenance import parse_sha256sums, sha256_file
from fleetgate.lab.keys import ssh_argv
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import load_state
from fleetgate.spec.derive import packer_vars
from fleetgate.spec.loader import load_class
from tests.conftest import FLEETGATE, REPO, fleetgate, timed
from tests.integration.conftest import GoldenImages

CLASSES = REPO / "inventory" / "classes"
FIXTURES = REPO / "tests" / "fixtures"
VENV_BIN = FLEETGATE.parent
LAB_CPU = load_class(CLASSES / "lab-cpu.yml")
LAB_VM = load_class(CLASSES / "lab-vm.yml")
BUILD_TIMEOUT = 3600


def _env(images: Path, **extra: str) -> dict[str, str]:
    return {"FLEETGATE_IMAGES_DIR": str(images),
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def _build(images: Path, *args: str, env: dict[str, str] | None = None
           ) -> subprocess.CompletedProcess[str]:
    return fleetgate("image", "build", *args, env={**_env(images), **(env or {})},
                     timeout=BUILD_TIMEOUT)


def _manifest(images: Path, name: str) -> dict[str, Any]:
    return dict(json.loads((images / name / "manifest.json").read_text()))


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    conf = REPO / ".fleetgate" / "test-containers.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text('[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]\n'
                    '[engine]\nruntime = "runc"\n')
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "CONTAINERS_CONF": str(conf)})


def _build_containers_left(image: str) -> list[str]:
    """Build containers of `image` (its label value starts with the image name) still there.
    Only this build's: another test process may be building another image right now."""
    out = _podman("ps", "-a", "--filter", "label=io.fleetgate.image-build",
                  "--format", '{{.Names}} {{index .Labels "io.fleetgate.image-build"}}').stdout
    return [name for name, _, label in (line.partition(" ") for line in out.splitlines())
            if label.startswith(f"{image}-")]


@pytest.fixture(scope="module")
def images(golden: GoldenImages) -> Path:
    """The session's golden-image store (tests/integration/conftest.py): the lab-cpu and
    lab-vm builds asserted on here are the ones the other lab files start hosts from."""
    return golden.root


@pytest.fixture(scope="module")
def built(golden: GoldenImages) -> dict[str, dict[str, Any]]:
    """lab-cpu and lab-vm, built once per session (one after the other: 2 cores)."""
    out: dict[str, dict[str, Any]] = {}
    for nc in (LAB_CPU, LAB_VM):
        golden.build(nc.name)
        out[nc.name] = golden.manifests[f"{nc.name}-{nc.version}"]
    return out


# --- the template ---------------------------------------------------------------------------

def test_packer_template_is_formatted_and_valid_for_every_class(tmp_path: Path) -> None:
    for d in ("packer", "packer/plugins"):
        fmt = subprocess.run(["packer", "fmt", "-check", "-diff", d], cwd=REPO,
                             capture_output=True, text=True, timeout=60, check=False)
        assert fmt.returncode == 0, f"{d}: {fmt.stdout}{fmt.stderr}"
    (tmp_path / "fleetgate-upload").mkdir()
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
           "CHECKPOINT_DISABLE": "1"}
    for cls in sorted(CLASSES.glob("*.yml")):
        var_file = tmp_path / f"{cls.stem}.pkrvars.json"
        var_file.write_text(json.dumps(packer_vars(load_class(cls))))
        proc = subprocess.run(
            ["packer", "validate", f"-var-file={var_file}", f"-var=output_dir={tmp_path}",
             f"-var=work_dir={tmp_path}", "packer"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
        # All three sources (docker, qemu, amazon-ebs) are prepared by validate.
        assert proc.returncode == 0, f"{cls.name}: {proc.stdout}{proc.stderr}"


def test_required_plugins_stay_out_of_the_main_template() -> None:
    block = re.compile(r"^\s*required_plugins\s*\{", re.MULTILINE)
    main = "".join(p.read_text() for p in (REPO / "packer").glob("*.pkr.hcl"))
    assert not block.search(main), "Packer 1.6.6 rejects required_plugins"
    assert block.search((REPO / "packer" / "plugins" / "required_plugins.pkr.hcl").read_text())


# --- bad input: one line, exit 2, nothing built ----------------------------------------------

def _one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_unknown_class_is_refused(tmp_path: Path) -> None:
    line = _one_line_exit_2(_build(tmp_path, "no-such-class"))
    assert "unknown class" in line and "no-such-class" in line
    assert list(tmp_path.iterdir()) == []


def test_packer_missing_from_path_is_refused(tmp_path: Path) -> None:
    line = _one_line_exit_2(_build(tmp_path / "out", "lab-cpu",
                                   env={"PATH": str(VENV_BIN)}))
    assert "packer not found on PATH" in line
    assert not any((tmp_path / "out").iterdir())


def test_unwritable_output_dir_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    line = _one_line_exit_2(_build(tmp_path, "lab-cpu", "--out", str(blocker / "images")))
    assert line.startswith("fleetgate: --out: ") and "not writable" in line


@pytest.mark.lab
def test_uninstallable_kernel_abi_is_refused_before_packer_starts(tmp_path: Path) -> None:
    # A packer on PATH that records being started: it must never be.
    shim = tmp_path / "bin"
    shim.mkdir()
    started = tmp_path / "packer-started"
    real = shutil.which("packer")
    assert real
    (shim / "packer").write_text(f'#!/bin/sh\ntouch {started}\nexec {real} "$@"\n')
    (shim / "packer").chmod(0o755)
    out = tmp_path / "images"
    proc = _build(out, str(FIXTURES / "classes" / "lab-cpu-nokernel.yml"),
                  env={"PATH": f"{shim}{os.pathsep}{VENV_BIN}{os.pathsep}{os.environ['PATH']}"})
    line = _one_line_exit_2(proc)
    assert "kernel.abi" in line and "not installable" in line
    assert "linux-image-6.1.0-99-cloud-amd64=6.1.999-1" in line
    assert not started.exists(), "packer was started"
    assert not any(out.iterdir())


# --- lab-cpu and lab-vm -------------------------------------------------------------------

def _check_common(images: Path, m: dict[str, Any], nc: Any) -> Path:
    d = images / f"{nc.name}-{nc.version}"
    assert m["class"] == nc.name and m["image"]["version"] == nc.version
    assert m["drift"] == []
    # Verified inside the image: the pinned kernel installed, at its version, and the default.
    k = m["verified"]["kernel"]
    assert k["abi"] == nc.kernel.abi
    assert k["package_version"] == nc.kernel.package_version
    assert k["default_boot"] == nc.kernel.abi
    assert {r["status"] for r in m["components"]} == {"ok"}
    # Build record.
    b = m["build"]
    assert len(b["git_revision"]) == 40 and isinstance(b["git_dirty"], bool)
    assert len(b["template_sha256"]) == 64
    assert b["base_image"]["ref"].startswith("localhost/fleetgate-lab-base:")
    # Files: checksums, package list, the image's own manifest, Packer's manifest.
    sums = parse_sha256sums((d / "sha256sums").read_text())
    assert set(sums) == {"rootfs.tar", "manifest.json", "image-manifest.json", "packages.txt",
                         "packer-manifest.json"}
    for name, digest in sums.items():
        assert sha256_file(d / name) == digest, name
    assert m["image"]["artifact_sha256"] == sums["rootfs.tar"]
    assert package_list_sha256((d / "packages.txt").read_text()) == m["package_list_sha256"]
    own = json.loads((d / "image-manifest.json").read_text())
    assert node_part(m) == own
    packer_manifest = json.loads((d / "packer-manifest.json").read_text())
    custom = packer_manifest["builds"][0]["custom_data"]
    assert custom["class"] == nc.name and custom["class_version"] == str(nc.version)
    assert custom["git_revision"] == b["git_revision"]
    assert custom["template_sha256"] == b["template_sha256"]
    # The artifact itself carries the same manifest and its build record; sysprep ran.
    with tarfile.open(d / "rootfs.tar") as tf:
        names = set(tf.getnames())
        inside = json.loads(tf.extractfile("etc/fleetgate/manifest.json").read())  # type: ignore[union-attr]
        info = json.loads(tf.extractfile("etc/fleetgate/image.json").read())  # type: ignore[union-attr]
    assert inside == own
    assert info["name"] == f"{nc.name}-{nc.version}" and info["git_revision"] == b["git_revision"]
    assert not [n for n in names if n.startswith("etc/ssh/ssh_host_")], "host keys left in image"
    assert not [n for n in names if "fleetgate-vendor" in n or n.startswith("tmp/fleetgate")]
    return d


@pytest.mark.lab
def test_lab_cpu_image_carries_the_class_pins(images: Path,
                                              built: dict[str, dict[str, Any]]) -> None:
    _check_common(images, built["lab-cpu"], LAB_CPU)
    assert built["lab-cpu"]["image"]["lab_kind"] == "container"


@pytest.mark.lab
def test_lab_vm_image_carries_the_class_pins_and_its_dkms_module(
        images: Path, built: dict[str, dict[str, Any]]) -> None:
    m = built["lab-vm"]
    _check_common(images, m, LAB_VM)
    mod = LAB_VM.dkms[0]
    entries = [e for e in m["verified"]["dkms"] if e["name"] == mod.name]
    assert {"name": mod.name, "version": mod.version, "kernel": LAB_VM.kernel.abi,
            "arch": "x86_64", "status": "installed"} in entries
    # modinfo reads the module file built for the pinned kernel (its MODULE_VERSION, which
    # need not equal the DKMS package version: vpoll 0.1 declares 0.01).
    assert m["verified"]["modinfo"][mod.name]


@pytest.mark.lab
def test_existing_image_version_is_refused(images: Path,
                                           built: dict[str, dict[str, Any]]) -> None:
    line = _one_line_exit_2(_build(images, "lab-cpu"))
    assert "already exists" in line and "--force" in line
    listed = json.loads(fleetgate("image", "list", "--json", env=_env(images), check=True).stdout)
    assert {"lab-cpu-1", "lab-vm-1"} <= {i["name"] for i in listed}
    shown = fleetgate("image", "show", "lab-vm:1", env=_env(images), check=True).stdout
    assert "vpoll" in shown and "installed" in shown


# --- the images, booted ---------------------------------------------------------------------

class Lab:
    def __init__(self, root: Path, images: Path):
        self.paths = LabPaths(root)
        self.env = {**_env(images), "FLEETGATE_LAB_DIR": str(root),
                    "FLEETGATE_STATE_DIR": str(root.parent)}

    def hosts(self) -> list[Any]:
        state = load_state(self.paths.state)
        assert state is not None
        return state.hosts

    def ssh(self, host: Any, command: str) -> str:
        proc = subprocess.run(ssh_argv(self.paths, host, command), capture_output=True,
                              text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)
        assert proc.returncode == 0, f"{host.name}: {command}: {proc.stderr}"
        return proc.stdout.strip()


@pytest.fixture(scope="module")
def image_lab(tmp_path_factory: pytest.TempPathFactory, images: Path,
              built: dict[str, dict[str, Any]]) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("imglab") / "lab", images)
    # Containers only: a VM started from the lab-vm image, and what it boots, is
    # test_kernel_update.py's first test (its module's VM is that image's host), so the
    # suite's slowest lane boots that image under TCG once, not twice.
    with timed("lab up from images (2 containers)"):
        proc = fleetgate("lab", "up", "--containers", "2", "--image", "lab-cpu:1",
                         env=lab.env, timeout=900)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        yield lab
    finally:
        # The podman images the golden images were imported as are shared with every other
        # lab of the run (the same tag): the session's end removes them (conftest.py).
        fleetgate("lab", "down", env=lab.env)


@pytest.mark.lab
def test_lab_up_starts_container_hosts_from_the_lab_cpu_image(
        image_lab: Lab, images: Path) -> None:
    containers = [h for h in image_lab.hosts() if h.kind == "container"]
    assert len(containers) == 2
    ping = json.loads(fleetgate("fleet", "ping", "-i", str(image_lab.paths.inventory), "--json",
                                env=image_lab.env).stdout)
    assert {r["outcome"] for r in ping["hosts"].values()} == {"ok"}
    want = json.loads((images / "lab-cpu-1" / "image-manifest.json").read_text())
    digest = _manifest(images, "lab-cpu-1")["image"]["artifact_sha256"][:12]
    for h in containers:
        assert h.image == f"localhost/fleetgate-image-lab-cpu:1-{digest}"
        assert json.loads(image_lab.ssh(h, "cat /etc/fleetgate/manifest.json")) == want


# --- gates that fail the build --------------------------------------------------------------

def _fgbroken_deb(dest: Path) -> Path:
    """Package tests/fixtures/dkms/fgbroken-1.0 the way Debian packages DKMS sources."""
    root = dest / "pkg"
    src = root / "usr" / "src" / "fgbroken-1.0"
    shutil.copytree(FIXTURES / "dkms" / "fgbroken-1.0", src)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        "Package: fgbroken-dkms\nVersion: 1.0-1\nArchitecture: all\n"
        "Maintainer: fleetgate tests <tests@fleetgate.invalid>\nDepends: dkms\n"
        "Description: fleetgate test fixture: a DKMS module that builds only on 6.1.0-55\n")
    postinst = root / "DEBIAN" / "postinst"
    postinst.write_text('#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
                        '  dkms status -m fgbroken -v 1.0 | grep -q . || '
                        'dkms add -m fgbroken -v 1.0\nfi\n')
    postinst.chmod(0o755)
    debs = dest / "debs"
    debs.mkdir()
    deb = debs / "fgbroken-dkms_1.0-1_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)],
                   check=True, capture_output=True, timeout=60)
    return debs


@pytest.mark.lab
@pytest.mark.slow
def test_dkms_module_that_cannot_build_fails_the_build_and_leaves_nothing(
        tmp_path: Path) -> None:
    debs = _fgbroken_deb(tmp_path)
    out = tmp_path / "images"
    with timed("failing build lab-vm-fgbroken"):
        proc = _build(out, str(FIXTURES / "classes" / "lab-vm-fgbroken.yml"),
                      "--vendor-debs", str(debs))
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("fleetgate: lab-vm-fgbroken-1: ")
    assert "fgbroken/1.0 failed to build for kernel 6.1.0-57-cloud-amd64" in line
    assert "dkms_modules" in line
    assert list(out.iterdir()) == [], "a failed build left files in the image store"
    assert _build_containers_left("lab-vm-fgbroken-1") == []


# --- qemu source: opt-in (about 8 minutes of TCG) ------------------------------------------

def _debugfs(disk: Path, request: str) -> str:
    return subprocess.run(["debugfs", "-R", request, str(disk)], capture_output=True,
                          text=True, timeout=60, check=False).stdout


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("FLEETGATE_TEST_QEMU") != "1",
                    reason="qemu source under TCG takes ~8 min; set FLEETGATE_TEST_QEMU=1")
def test_qemu_source_builds_a_disk_that_boots_the_pin(tmp_path: Path) -> None:
    from fleetgate.lab.vm_supervisor import extract_boot_files, qemu_argv

    out = tmp_path / "images"
    with timed("build lab-cpu (qemu, TCG)"):
        proc = _build(out, "lab-cpu", "--source", "qemu")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    m = _manifest(out, "lab-cpu-1")
    assert m["image"]["source"] == "qemu" and m["image"]["artifact"] == "disk.raw"
    assert m["drift"] == [] and {r["status"] for r in m["components"]} == {"ok"}
    disk = out / "lab-cpu-1" / "disk.raw"
    assert sha256_file(disk) == m["image"]["artifact_sha256"]
    assert f'"boot/vmlinuz-{LAB_CPU.kernel.abi}"' in _debugfs(disk, "stat /vmlinuz")
    assert "fleetgate-image-build" not in _debugfs(disk, "cat /root/.ssh/authorized_keys")
    assert "ssh_host_" not in _debugfs(disk, "ls /etc/ssh")
    # Boot it the way the lab's VM supervisor does; sshd must come up (first-boot host keys).
    hdir = tmp_path / "boot"
    hdir.mkdir()
    shutil.move(disk, hdir / "disk.raw")
    kname, kernel, initrd = extract_boot_files(hdir / "disk.raw", hdir)
    assert kname == f"vmlinuz-{LAB_CPU.kernel.abi}"
    port = 20000 + os.getpid() % 20000
    qemu = subprocess.Popen(qemu_argv(hdir, port, 1024, kernel, initrd))
    try:
        deadline, banner = time.monotonic() + 300, b""
        while time.monotonic() < deadline and not banner.startswith(b"SSH-"):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                    s.settimeout(5)
                    banner = s.recv(64)
            except OSError:
                time.sleep(1)
        assert banner.startswith(b"SSH-"), (hdir / "console.log").read_text()[-3000:]
        console = (hdir / "console.log").read_text(errors="replace")
        assert f"Linux version {LAB_CPU.kernel.abi} " in console
    finally:
        qemu.terminate()
        qemu.wait(timeout=30)
    shutil.rmtree(out)
