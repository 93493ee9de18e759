"""The host-state reading: the real shell command, run here by sh (this machine is a Debian
host like the lab's), against what Python reads of the same files and dpkg's own answer."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetgate.rollout import hostread
from fleetgate.rollout.hostread import Wanted
from fleetgate.rollout.target import Target


def _sh(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                          check=True).stdout


def _dpkg_version(pkg: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True,
                          text=True, check=True).stdout


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    out = {
        "crlf": tmp_path / "crlf", "long": tmp_path / "long", "latin1": tmp_path / "latin1",
        "missing": tmp_path / "missing", "dir": tmp_path / "dir", "forged": tmp_path / "forged",
    }
    out["crlf"].write_bytes(b"  v2\r\n")
    out["long"].write_text("é" * (hostread.FILE_LIMIT + 10))
    out["latin1"].write_bytes(b"caf\xe9\n")
    out["dir"].mkdir()
    # Content shaped like the command's own lines must not become them.
    out["forged"].write_text("x\nk 0.0.0-forged\nend\n")
    return out


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian host")
def test_the_command_reads_what_python_and_dpkg_read(tmp_path: Path,
                                                     files: dict[str, Path]) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"class": "lab-cpu", "class_version": 2}\n')
    want = Wanted(packages=["coreutils", "fleetgate-no-such-package"],
                  files=[str(p) for p in files.values()])
    state = hostread.parse(_sh(hostread.command(want, manifest_path=str(manifest))), want)
    assert state is not None
    assert state["kernel_release"] == os.uname().release
    assert state["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert state["manifest"] == {"class": "lab-cpu", "class_version": 2}
    assert state["packages"] == {"coreutils": _dpkg_version("coreutils"),
                                 "fleetgate-no-such-package": None}
    got = state["files"]
    assert got[str(files["crlf"])] == "v2"
    assert got[str(files["long"])] == "é" * hostread.FILE_LIMIT  # characters, not bytes
    assert got[str(files["latin1"])] == "caf\ufffd"
    assert got[str(files["missing"])] is None and got[str(files["dir"])] is None
    assert got[str(files["forged"])] == "x\nk 0.0.0-forged\nend"


@pytest.mark.parametrize(("text", "expect"), [
    (None, None), ("", None), ("not json {", {"_error": "manifest is not JSON"}),
])
def test_a_manifest_that_is_absent_empty_or_broken(tmp_path: Path, text: str | None,
                                                   expect: object) -> None:
    manifest = tmp_path / "manifest.json"
    if text is not None:
        manifest.write_text(text)
    want = Wanted()
    state = hostread.parse(_sh(hostread.command(want, manifest_path=str(manifest))), want)
    assert state is not None and state["manifest"] == expect
    assert state["packages"] == {} and state["files"] == {}


@pytest.mark.parametrize(("packages", "files", "bad"), [
    (["linux-image-6.1.0-57-amd64; reboot"], [], "linux-image-6.1.0-57-amd64; reboot"),
    (["$(id)"], [], "$(id)"),
    ([], ["etc/relative"], "etc/relative"),
    ([], ["/etc/a b"], "/etc/a b"),
    ([], ["/etc/`id`"], "/etc/`id`"),
])
def test_a_name_a_plan_could_not_hold_never_reaches_the_command(
        packages: list[str], files: list[str], bad: str) -> None:
    with pytest.raises(ValueError, match="refusing to read unsafe names") as exc:
        hostread.command(Wanted(packages=packages, files=files))
    assert repr(bad) in str(exc.value)


def _printed(lines: list[str]) -> str:
    return "".join(f"{line}\r\n" for line in lines)  # as a raw task with a tty returns it


def test_parse_takes_a_tty_reading_after_a_banner_and_refuses_a_cut_off_one() -> None:
    want = Wanted(packages=["a-pkg", "b-pkg"], files=["/etc/v"])
    v = base64.b64encode(b"3\n").decode()
    whole = ["Welcome to the lab", hostread.MAGIC, "k 6.1.0-57-amd64", "b -", "m -",
             f"f0 {v}", "p\ta-pkg\t1.2-3\tinstalled", "p\tb-pkg\t4.5\tconfig-files", "d 0",
             "end"]
    state = hostread.parse(_printed(whole), want)
    assert state == {"kernel_release": "6.1.0-57-amd64", "boot_id": None, "manifest": None,
                     "packages": {"a-pkg": "1.2-3", "b-pkg": None}, "files": {"/etc/v": "3"}}
    assert hostread.parse(_printed(whole[:-1]), want) is None
    assert hostread.parse(_printed(["k 6.1.0", "end"]), want) is None
    # dpkg-query timed out (rc 124): what it printed is not an answer.
    timed_out = [*whole[:-2], "d 124", "end"]
    state = hostread.parse(_printed(timed_out), want)
    assert state is not None and state["packages"] == {"a-pkg": None, "b-pkg": None}


def test_what_a_plan_wants_read_is_its_targets_together() -> None:
    a = Target(packages={"linux-image-amd64": "6.1.0-57"}, files={"/etc/v": "1"})
    b = Target(packages={"nvidia-driver": "535.1-1", "linux-image-amd64": "6.1.0-55"})
    assert hostread.wanted([a, b]) == Wanted(
        packages=["linux-image-amd64", "nvidia-driver"], files=["/etc/v"])


@pytest.mark.parametrize(("res", "unreachable", "why"), [
    ({"msg": "Failed to connect to the host via ssh: timed out"}, True,
     "unreachable: Failed to connect to the host via ssh: timed out"),
    ({"rc": 127, "stderr": "sh: 1: base64: not found\n"}, False,
     "failed (rc 127): sh: 1: base64: not found"),
    ({"rc": 0, "stdout": "Welcome\r\n"}, False, "not a whole reading: Welcome"),
])
def test_why_a_result_holds_no_reading(res: dict[str, object], unreachable: bool,
                                       why: str) -> None:
    assert hostread.reading(res, Wanted()) is None
    assert hostread.why_not(res, unreachable=unreachable) == why
