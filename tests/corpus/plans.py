"""Bad rollout plans: the base plan (examples/bad-blas/rollout.yml adapted to the corpus site)
with one thing wrong, or a file that is not a plan. Most go through `rollout plan`, which
touches no host. The ones that smuggle Ansible connection variables go through `rollout
start` with the window opened, so that if they were accepted their payload would really run
and leave its marker."""

from __future__ import annotations

from pathlib import Path

from tests.corpus.base import Base
from tests.corpus.entry import (
    FIFO_REASON,
    Doc,
    Entry,
    Mutation,
    drop,
    edits,
    fifo,
    mutated,
    not_regular,
    put,
    write,
    write_yaml,
)

# (id, mutation, field that must be named, the mistake); a tuple instead of the field is
# every fragment, for a refusal whose file is not the plan (a missing inventory is named).
MUTATIONS: list[tuple[str, Mutation, str | tuple[str, ...], str]] = [
    ("extra-vars-python-interpreter", put("change.extra_vars", {
        "ansible_python_interpreter": "/usr/bin/python3"}), "ansible_python_interpreter",
     "extra_vars choosing the interpreter on the hosts"),
    ("extra-vars-become", put("change.extra_vars", {"ansible_become": True,
                                                    "ansible_become_method": "su"}),
     "ansible_become", "extra_vars turning on privilege escalation"),
    ("extra-vars-shell", put("change.extra_vars", {"note": "$(reboot)"}), "extra_vars",
     "a command substitution in an extra var"),
    ("extra-vars-jinja", put("change.extra_vars", {"note": "{{ lookup('pipe', 'id') }}"}),
     "extra_vars", "a Jinja lookup in an extra var"),
    ("playbook-dotdot", put("change.playbook", "../../etc/evil.yml"), "change.playbook",
     "a playbook path climbing out of the site"),
    ("playbook-absolute", put("change.playbook", "/etc/ansible/evil.yml"), "change.playbook",
     "an absolute playbook path"),
    ("playbook-missing", put("change.playbook", "playbooks/nope.yml"), "change.playbook",
     "a playbook that does not exist"),
    ("rollback-playbook-absolute", put("rollback.playbook", "/tmp/rollback.yml"),
     "rollback.playbook", "an absolute rollback playbook"),
    ("drain-playbook-dotdot", put("drain", {"drain_playbook": "../playbooks/drain.yml"}),
     "drain.drain_playbook", "a drain playbook outside the site"),
    ("classes-outside", put("change.classes", "../outside-classes"), "change.classes",
     "a class directory outside the site"),
    ("unknown-key", put("rollbak", {"playbook": "playbooks/noop.yml"}), "rollbak",
     "a typo'd section"),
    ("waves-pools-empty", put("waves", {"pools": []}), "waves", "an empty pool list"),
    ("waves-pool-unknown", put("waves", {"pools": ["pool_canary", "pool_nope"]}), "pool_nope",
     "a pool the inventory does not have"),
    ("steps-over-100", put("waves", {"steps": [1, "150%"]}), "waves.steps",
     "a wave of 150% of the hosts"),
    ("budget-negative", put("budgets.total.max_failed", -1), "budgets.total.max_failed",
     "a negative failure budget"),
    ("concurrency-zero", put("concurrency", 0), "concurrency", "no host at a time"),
    ("window-bad-time", put("window.start", "25:00"), "window.start", "hour 25"),
    ("window-unknown-tz", put("window.timezone", "Mars/Olympus_Mons"), "window",
     "a time zone that does not exist"),
    ("rollback-section-missing", drop("rollback"), "rollback",
     "on_failure rollback without a rollback section"),
    ("canary-unknown-check", put("canary.metrics", [{"name": "burn.tflops",
                                                     "direction": "higher"}]), "canary",
     "a canary metric of a check that does not exist"),
    ("canary-without-baseline", put("gates.baseline_hosts", 0), "baseline_hosts",
     "baseline canary analysis without baseline hosts"),
    ("gates-unknown-check", put("gates.checks", ["discovery", "burn"]), "gates.checks",
     "a gate check that does not exist"),
    ("approval-wave-too-high", put("approvals", {"before_waves": [5]}),
     "approvals.before_waves", "an approval before wave 5 of 2"),
    ("inventory-missing", put("targets.inventory", "../inventory/nope.ini"),
     ("nope.ini", "targets.inventory"), "an inventory that does not exist"),
    ("inventory-shell", put("targets.inventory", "hosts.ini;reboot"), "targets.inventory",
     "a shell separator in the inventory path"),
    ("class-unknown", put("targets.class", "no-such-class"), "no-such-class",
     "a target class that does not exist"),
    ("patterns-shell", put("targets.patterns", ["h1;reboot"]), "targets.patterns",
     "a shell separator in a host pattern"),
    ("from-class-contradiction", put("change.target.manifest", {
        "class_version": 7, "verified.userland.blas": "reference"}), "class_version",
     "an explicit class_version that contradicts from_class"),
]

# Connection variables that would run a command on the controller: started for real (window
# open, canary off so nothing is measured first), so acceptance shows as a marker file.
INJECTIONS: list[tuple[str, str, dict[str, object], str]] = [
    ("extra-vars-connection-local", "change", {"ansible_connection": "local",
                                               "ansible_python_interpreter": "{evil}"},
     "extra_vars running the change on the controller through a fake interpreter"),
    ("extra-vars-ssh-common-args", "change", {
        "ansible_ssh_common_args": "-o ProxyCommand={evil}"},
     "extra_vars giving ssh a ProxyCommand"),
    ("extra-vars-become-exe", "change", {"ansible_connection": "local",
                                         "ansible_become": True,
                                         "ansible_become_exe": "{evil}"},
     "extra_vars replacing the become executable"),
    ("rollback-extra-vars-connection", "rollback", {
        "ansible_connection": "local", "ansible_python_interpreter": "{evil}"},
     "rollback extra_vars running on the controller"),
]


def _runnable(plan: Doc) -> Doc:
    """The base plan as it would really run now: window open, no canary to measure first."""
    out = mutated(plan, edits(drop("window"), drop("canary"), put("gates.baseline_hosts", 0),
                              put("gates.checks", [])))
    return out


def _plan_entry(base: Base, eid: str, path: Path, field: str | tuple[str, ...], why: str,
                argv: tuple[str, ...] | None = None) -> Entry:
    expect = field if isinstance(field, tuple) else tuple(
        x for x in (f"{eid}.yml", field) if x)
    return Entry(f"plan-{eid}", "plan", argv or ("rollout", "plan", str(path)), expect, why,
                 inputs=(path,))


def entries(base: Base) -> list[Entry]:
    plans = base.site / "plans"
    out: list[Entry] = []
    for eid, mutation, field, why in MUTATIONS:
        path = write_yaml(plans / f"{eid}.yml", mutated(base.plan, mutation))
        out.append(_plan_entry(base, eid, path, field, why))
    for eid, section, extra, why in INJECTIONS:
        eid_full = f"plan-{eid}"
        evil = str(base.evil_script(eid_full))
        values = {k: v.format(evil=evil) if isinstance(v, str) else v
                  for k, v in extra.items()}
        plan = mutated(_runnable(base.plan), put(f"{section}.extra_vars", values))
        path = write_yaml(plans / f"{eid}.yml", plan)
        out.append(_plan_entry(base, eid, path, f"extra_vars|{section}", why,
                               argv=("rollout", "start", str(path))))
    plan_text = (base.plan_file.read_text())
    raw: list[tuple[str, str | bytes, str, str]] = [
        ("empty-file", "", "", "an empty plan"),
        ("top-level-list", "- name: x\n", "top level", "a list instead of a mapping"),
        ("yaml-syntax", plan_text + "waves: [pool_canary\n", "line", "an unclosed flow"),
        ("duplicate-key", plan_text + "concurrency: 500\n", "concurrency",
         "a second concurrency key that would win silently"),
        ("invalid-utf8", plan_text.replace("description: ", "description: \udcff", 1)
         .encode("utf-8", "surrogateescape"), "", "a byte that is not UTF-8"),
    ]
    for eid, content, field, why in raw:
        path = write(plans / f"{eid}.yml", content)
        out.append(_plan_entry(base, eid, path, field, why))
    for eid, path, reason, why in not_regular(lambda e: plans / f"{e}.yml", "a plan", "the plan"):
        out.append(Entry(f"plan-{eid}", "plan", ("rollout", "plan", str(path)),
                         (f"{eid}.yml", reason), why))
    f = fifo(plans / "fifo-start.yml")
    out.append(Entry("plan-fifo-start", "plan", ("rollout", "start", str(f)),
                     ("fifo-start.yml", FIFO_REASON), "a named pipe given to rollout start"))
    return out
