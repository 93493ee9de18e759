"""fleetgate_hostcmd, the one host command runner, run for real on this machine: a hung tool
and its children die at the deadline, a missing tool is "missing", argv only. And the dkms
reader's grouping, on real `dkms status` lines of both formats."""

from __future__ import annotations

import os
import sys
import time

import pytest

from tests.unit.ansible_modules import module_utils

hostcmd = module_utils("fleetgate_hostcmd")
hostpkg = module_utils("fleetgate_hostpkg")


def test_ok_failed_and_accepted_return_codes() -> None:
    got = hostcmd.run([sys.executable, "-c", "import os; print(os.environ['LC_ALL'])"], 30)
    assert (got.status, got.rc, got.stdout) == ("ok", 0, "C\n")
    bad = [sys.executable, "-c", "import sys; sys.stderr.write('no'); sys.exit(3)"]
    got = hostcmd.run(bad, 30)
    assert (got.status, got.rc, got.stderr, got.ok) == ("failed", 3, "no", False)
    assert hostcmd.run(bad, 30, ok_rc=(0, 3)).ok


def test_missing_tool_is_reported_not_raised() -> None:
    got = hostcmd.run(["fleetgate-no-such-tool", "--x"], 5)
    assert (got.status, got.rc, got.duration_s) == ("missing", None, 0.0)
    assert hostcmd.stdout_of(["fleetgate-no-such-tool"], 5) is None


@pytest.mark.parametrize("argv", ["ls -l", b"ls", [], ["ls", 1]])
def test_a_shell_string_is_refused(argv: object) -> None:
    with pytest.raises(TypeError, match="argv"):
        hostcmd.run(argv, 5)


def test_hung_tool_and_its_children_are_killed_at_the_deadline(tmp_path: object) -> None:
    # The tool ignores SIGTERM and leaves a child holding our pipes, like a wedged nvidia-smi.
    script = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, "
              "signal.SIG_IGN); c = subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(60)']); print(c.pid, flush=True); time.sleep(60)")
    t0 = time.monotonic()
    got = hostcmd.run([sys.executable, "-c", script], 1.5)
    elapsed = time.monotonic() - t0
    assert got.status == "timeout" and got.rc is None and got.stdout == ""
    assert elapsed < 10, elapsed
    # no process of that group is left
    time.sleep(0.3)
    leftovers = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = open(f"/proc/{pid}/cmdline", "rb").read()  # noqa: SIM115
            except OSError:
                continue
            if b"time.sleep(60)" in cmdline and b"SIG_IGN" not in cmdline:
                leftovers.append(pid)
    assert leftovers == []


def test_search_path_adds_the_system_directories() -> None:
    path = hostcmd.search_path({"PATH": "/opt/x/bin:/usr/bin"}).split(":")
    assert path[:2] == ["/opt/x/bin", "/usr/bin"] and "/usr/sbin" in path
    assert len(path) == len(set(path))


def test_dkms_states_group_modules_of_both_dkms_formats() -> None:
    text = ("vpoll/0.1, 6.1.0-55-cloud-amd64, x86_64: installed\n"
            "vpoll/0.1, 6.1.0-57-cloud-amd64, x86_64: built\n"
            "fgbroken/1.0: added\n"
            "nvidia, 535.261.03, 6.1.0-55-amd64, x86_64: installed (WARNING! Diff between "
            "built and installed module!)\n"
            "Error! Could not locate dkms.conf file.\n"
            "something dkms 4 might print\n")
    entries = hostpkg.parse_dkms_status(text, strict=False)
    assert hostpkg.dkms_states(entries) == {
        ("vpoll", "0.1"): {"6.1.0-55-cloud-amd64": "installed",
                           "6.1.0-57-cloud-amd64": "built"},
        ("fgbroken", "1.0"): {},
        ("nvidia", "535.261.03"): {"6.1.0-55-amd64": "installed"},
    }
    with pytest.raises(module_utils("fleetgate_parsers").ParseError):
        hostpkg.parse_dkms_status(text)  # the strict parser (smoke parse) refuses the text


def test_dpkg_reader_reads_this_machine() -> None:
    got = hostpkg.dpkg_versions(["dpkg", "fleetgate-no-such-package"])
    assert got["fleetgate-no-such-package"] is None
    assert got["dpkg"] and got["dpkg"][0].isdigit()
    assert len(hostpkg.package_list_sha256() or "") == 64
