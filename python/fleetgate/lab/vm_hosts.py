"""Lab hosts as qemu VMs that boot a real pinned kernel.

The disk is an ext4 image made with `mkfs.ext4 -d` from an mmdebstrap rootfs that includes the
class's kernel ABI. qemu boots it directly (-kernel/-initrd), and a small supervisor process
plays bootloader: before every boot it reads the kernel that the disk's /vmlinuz and
/initrd.img links point at, so a kernel update followed by a reboot really changes kernels.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetgate.errors import LabError
from fleetgate.lab.keys import host_key
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import IMAGE_ID_FILE, LabHost
from fleetgate.spec.schema import NodeClass
from fleetgate.system.procs import pid_alive, require_tool, run
from fleetgate.system.recipes import vm_recipe
from fleetgate.system.rootfs import extract, rootfs_tar

DISK_SIZE = "4G"

# Lab VMs run under TCG emulation and boot only from a virtio disk, and a kernel update builds
# an initramfs there. MODULES=dep (what this machine's root device needs) instead of Debian's
# "most" cuts it from hundreds of modules to a few dozen; gzip -1 instead of gzip's default
# level compresses its 16 MB in 3.7 s (gzip -9 takes 23 s) under TCG. Real hosts keep
# Debian's defaults: this file is written into lab disks only.
LAB_INITRAMFS_CONF = "etc/initramfs-tools/conf.d/fleetgate-lab.conf"
LAB_INITRAMFS_TEXT = ("# fleetgate lab VM (emulated, virtio only)\nMODULES=dep\n"
                      "COMPRESS=gzip\nCOMPRESSLEVEL=1\n")
# Housekeeping that a lab VM's disk masks. Under TCG the ext4 scrub costs 7 s of every boot,
# and apt's daily jobs, once their timers come due, run apt-get for minutes and hold the dpkg
# lock that a kernel update under test waits on. A lab disk is thrown away with its lab, so
# nothing is lost; real hosts keep them (this is written into lab disks only).
LAB_MASKED_UNITS = ("e2scrub_reap.service", "e2scrub_all.timer", "apt-daily.timer",
                    "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "fstrim.timer")
# dpkg syncs every file it unpacks before renaming it into place; a kernel update unpacks
# about 17,000 (image and headers), and under TCG each sync is an emulated ext4 journal commit.
# Side by side on two lab VMs, unpacking the 6.1.0-57 image and headers took 224 s with
# unsafe-io against 289 s without. The disk is written through on every clean reboot (see
# vm_supervisor.py) and thrown away with its lab; real hosts keep dpkg's default.
LAB_DPKG_CONF = "etc/dpkg/dpkg.cfg.d/fleetgate-lab"
LAB_DPKG_TEXT = "# fleetgate lab VM (emulated, thrown away with its lab)\nforce-unsafe-io\n"


def make_disk(paths: LabPaths, host: LabHost, nc: NodeClass, rootfs: Path | None = None) -> Path:
    """Build this VM's disk: cached rootfs (or a golden image's rootfs tar) + its own hostname,
    host key, authorized key and the lab's initramfs setting, and the image id of a golden
    image's host (what a cloud's metadata would say it was made from)."""
    hdir = paths.host_dir(host.name)
    disk = hdir / "disk.raw"
    if disk.exists():
        return disk
    tar = rootfs if rootfs is not None else rootfs_tar(vm_recipe(nc))
    staging = hdir / "rootfs"
    extract(tar, staging)
    try:
        key = host_key(paths, host.name)
        ssh = staging / "etc" / "ssh"
        shutil.copy2(key, ssh / "ssh_host_ed25519_key")
        shutil.copy2(f"{key}.pub", ssh / "ssh_host_ed25519_key.pub")
        os.chmod(ssh / "ssh_host_ed25519_key", 0o600)
        auth = staging / "root" / ".ssh" / "authorized_keys"
        auth.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        shutil.copy2(paths.ssh_key.with_suffix(".pub"), auth)
        os.chmod(auth, 0o600)
        (staging / "etc" / "hostname").write_text(f"{host.name}\n")
        for rel, text in ((LAB_INITRAMFS_CONF, LAB_INITRAMFS_TEXT),
                          (LAB_DPKG_CONF, LAB_DPKG_TEXT)):
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_text(text)
        units = staging / "etc" / "systemd" / "system"
        units.mkdir(parents=True, exist_ok=True)
        for unit in LAB_MASKED_UNITS:
            (units / unit).unlink(missing_ok=True)
            (units / unit).symlink_to("/dev/null")
        if host.image_id is not None:
            record = staging / IMAGE_ID_FILE.lstrip("/")
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(host.image_id + "\n")
        tmp = disk.with_suffix(".partial")
        run([require_tool("mkfs.ext4", "e2fsprogs"), "-q", "-F", "-L", "fleetgate-root",
             "-d", str(staging), str(tmp), DISK_SIZE], timeout=300)
        os.replace(tmp, disk)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return disk


def start_vm(paths: LabPaths, host: LabHost, *, memory_mb: int = 1024) -> int:
    """Start the supervisor for this VM in its own session; it outlives the CLI call."""
    require_tool("qemu-system-x86_64", "qemu-system-x86")
    require_tool("debugfs", "e2fsprogs")
    hdir = paths.host_dir(host.name)
    (hdir / "stop").unlink(missing_ok=True)
    log = (hdir / "supervisor.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "fleetgate.lab.vm_supervisor",
         "--dir", str(hdir), "--port", str(host.port), "--memory", str(memory_mb)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
    )
    log.close()
    return proc.pid


def stop_vm(paths: LabPaths, host: LabHost, *, timeout: float = 30) -> None:
    hdir = paths.host_dir(host.name)
    (hdir / "stop").touch()
    pid = host.supervisor_pid
    if pid_alive(pid):
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    # Belt and braces: a qemu orphaned by a killed supervisor still holds the port.
    qpid_file = hdir / "qemu.pid"
    if qpid_file.exists():
        try:
            qpid = int(qpid_file.read_text().strip() or 0)
        except ValueError:
            qpid = 0
        if pid_alive(qpid) and _is_our_qemu(qpid, hdir):
            os.kill(qpid, signal.SIGKILL)
        qpid_file.unlink(missing_ok=True)


def _is_our_qemu(pid: int, hdir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "qemu-system" in cmdline and str(hdir) in cmdline


def monitor_command(paths: LabPaths, host: LabHost, command: str) -> str:
    """Send one HMP command to the VM's qemu monitor socket."""
    import socket

    sock_path = paths.host_dir(host.name) / "monitor.sock"
    if not sock_path.exists():
        raise LabError("qemu monitor socket missing: is the VM running?", source=host.name)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(sock_path))
        time.sleep(0.2)
        s.recv(4096)  # banner
        s.sendall(command.encode() + b"\n")
        time.sleep(0.3)
        return s.recv(4096).decode(errors="replace")
