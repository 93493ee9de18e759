"""The smoke suite's session: run a probe on a testinfra host, judge it, record the result.

A host's node class comes from its inventory variables (`fleetgate_class`, set by the lab
inventory or a class_<name> group) and is loaded through fleetgate's own validator; its
thresholds are resolved from fleetgate/smoke/thresholds.yml. The probe runs over the host's
testinfra connection under coreutils `timeout`; ssh failing (rc 255) marks the host
unreachable for the rest of the session, so a dead host costs one connect timeout, not one
per check.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from testinfra.host import Host
from testinfra.utils.ansible_runner import AnsibleRunner

from fleetgate.errors import FleetgateError
from fleetgate.runner.inventory import HOST_RE, host_var_problems, plain_ansible_json
from fleetgate.smoke.judge import judge, unmeasured
from fleetgate.smoke.model import CheckResult, parse_probe_output
from fleetgate.smoke.probeset import probe_files, remote_command, set_version
from fleetgate.smoke.thresholds import Check, Plan, resolve
from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import NodeClass

TIMEOUT_RCS = (124, 137)  # coreutils timeout: TERM sent / KILL sent


def connection_refusal(name: str, hv: dict[str, Any]) -> str | None:
    """Why the suite must not connect to host `name` with variables `hv`, or None: the
    inventory layer's checks, on testinfra's own view of the inventory.

    testinfra's ansible backend builds the host's ssh command as one `/bin/sh -c` string
    (testinfra/backend/ssh.py): user, port, key file and host are shlex-quoted, but
    ansible.cfg's ssh_args and the host's ansible_ssh_common_args and ansible_ssh_extra_args
    go in as they are, so `-o X=1; touch F #` would run `touch` on the controller. The
    controller checked its own resolution before this process started (runner/inventory.py),
    and the runner hands testinfra that very answer (prime_inventory); the suite can also be
    run by hand against any source, which testinfra then resolves itself, so the values
    testinfra will use are checked again here, before the host's first command."""
    problems = ([("name", "host name has characters outside [A-Za-z0-9_.-]")]
                if not HOST_RE.fullmatch(name) else host_var_problems(name, hv))
    if not problems:
        return None
    var, why = problems[0]
    return f"refused before connecting: hosts.{name}.{var}: {why}"


def prime_inventory(source: str, resolved: Path) -> None:
    """Give testinfra's runner for `source` the answer the controller already has.

    testinfra resolves `--ansible-inventory` by starting `ansible-inventory --list` in every
    pytest process (0.7 to 1.0 s of CPU here, once per smoke group and gate). The source here is the
    controller's own: Inventory.hosts_source wrote `resolved` (this very answer, narrowed to
    the group's hosts) and a script that prints it, so the second resolution can only repeat
    it. Host names and connection values are still checked on testinfra's view, as for any
    source (connection_refusal)."""
    doc = plain_ansible_json(json.loads(resolved.read_text()))
    # testinfra keeps one runner per source (AnsibleRunner.get_runner) and its inventory in a
    # functools.cached_property, whose value lives in the instance's __dict__.
    AnsibleRunner.get_runner(source).__dict__["inventory"] = doc


class SmokeSession:
    """One per pytest process: caches each host's class, plan, probe version, reachability."""

    def __init__(self, results: Path | None, probes_dir: str) -> None:
        self.results = results
        self.probes_dir = probes_dir
        self.expected_version: str | None
        try:
            self.expected_version = set_version(probe_files())
        except OSError:  # an installed package without the checkout's roles/
            self.expected_version = None
        self._lock = threading.Lock()
        self._hosts: dict[str, dict[str, Any]] = {}

    @staticmethod
    def name(host: Host) -> str:
        return str(getattr(host.backend, "host", None) or host.backend.get_hostname())

    def _host_info(self, host: Host) -> dict[str, Any]:
        name = self.name(host)
        if name not in self._hosts:
            info: dict[str, Any] = {"unreachable": None, "version": None, "refused": None}
            try:
                hv = plain_ansible_json(host.ansible.get_variables())
                info["refused"] = connection_refusal(name, hv)
                if info["refused"] is None:
                    cls = hv.get("fleetgate_class")
                    if not cls:
                        raise FleetgateError("host has no fleetgate_class (not in a class_ "
                                             "group)")
                    _, nc = resolve_class(str(cls))
                    info.update(nc=nc, plan=resolve(nc))
            except FleetgateError as exc:
                info["class_error"] = exc.one_line()
            self._hosts[name] = info
        return self._hosts[name]

    def _probe_version(self, host: Host, info: dict[str, Any]) -> str | None:
        if info["version"] is None:
            out = host.run("cat %s/VERSION", self.probes_dir)
            info["version"] = out.stdout.strip() if out.rc == 0 else ""
        return str(info["version"]) or None

    def check(self, host: Host, check: Check) -> CheckResult:
        name = self.name(host)
        info = self._host_info(host)
        nc: NodeClass | None = info.get("nc")
        plan: Plan | None = info.get("plan")
        if info["refused"]:
            result = unmeasured(name, check, "not-run", info["refused"])
        elif nc is None or plan is None:
            result = unmeasured(name, check, "not-run", f"no node class: {info['class_error']}")
        elif info["unreachable"]:
            result = unmeasured(name, check, "unreachable",
                                f"unreachable (earlier in this run: {info['unreachable']})",
                                nc=nc, plan=plan)
        else:
            result = self._run(host, name, check, nc, plan, info)
        self.record(result)
        return result

    def _run(self, host: Host, name: str, check: Check, nc: NodeClass, plan: Plan,
             info: dict[str, Any]) -> CheckResult:
        try:
            version = self._probe_version(host, info)
            out = host.run(remote_command(check, nc, plan, probes_dir=self.probes_dir))
        except RuntimeError as exc:  # testinfra's ssh backend: ssh itself failed (rc 255)
            detail = " ".join(str(getattr(exc.args[0], "stderr", exc)).split())[-300:]
            info["unreachable"] = detail or "ssh failed"
            return unmeasured(name, check, "unreachable", f"unreachable: {detail}", nc=nc,
                              plan=plan)
        if out.rc in TIMEOUT_RCS and not out.stdout.strip():
            return unmeasured(name, check, "timeout",
                              f"the probe gave no answer within {plan.timeouts_s[check]:g}s "
                              "and was killed by the caller's timeout", nc=nc, plan=plan)
        try:
            report = parse_probe_output(out.stdout, source=f"{name}:{check}")
        except FleetgateError as exc:
            return unmeasured(name, check, "malformed", f"malformed probe output: "
                              f"{exc.one_line()}", nc=nc, plan=plan,
                              evidence={"rc": out.rc, "stdout": out.stdout[-2000:],
                                        "stderr": out.stderr[-2000:]})
        result = judge(name, report, nc, plan, probe_version=version)
        if self.expected_version and version != self.expected_version:
            result.warnings.append(f"probe set on the host is {version or 'absent'}, this "
                                   f"checkout's is {self.expected_version}: re-run smoke_probes")
        return result

    def record(self, result: CheckResult) -> None:
        if self.results is None:
            return
        with self._lock, self.results.open("a") as f:
            f.write(json.dumps(result.model_dump(mode="json"), allow_nan=False) + "\n")



def verdict(result: CheckResult) -> None:
    """pytest outcome of a verdict: pass passes, fail fails, inconclusive skips (with why)."""
    for w in result.warnings:
        print(f"warning: {result.host} {result.check}: {w}")
    if result.status == "inconclusive":
        pytest.skip(f"inconclusive ({result.probe_status}): {result.reason}")
    assert result.status == "pass", f"{result.host} {result.check}: {result.reason}"
