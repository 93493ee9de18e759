"""`fleetgate fleet`: operations on real hosts through ansible-runner."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from fleetgate.cli import output as ui
from fleetgate.cli.options import InventoryOpt, LimitOpt, inventory_sources, shared
from fleetgate.errors import BadInput
from fleetgate.runner import ansible
from fleetgate.runner.connection_vars import value_problem
from fleetgate.runner.inventory import HOST_RE, resolve_inventory
from fleetgate.site import content_root
from fleetgate.spec.schema import CLASS_NAME_RE
from fleetgate.triage.cachekey import cache_key, parse_engines, runtime_of
from fleetgate.triage.drift import class_hardware, host_drift, mixed_drift
from fleetgate.triage.drift import to_dict as drift_dict
from fleetgate.triage.fleetstate import Selection, read_states, select

app = typer.Typer(help="Operations on hosts, through ansible-runner.", no_args_is_help=True)

PLAYBOOK_RE = re.compile(r"^[A-Za-z0-9_./-]{1,300}$")


@dataclass(frozen=True)
class Hosts:
    """What a fleet command looks at and how it answers: the inventory's sources, the --limit
    pattern, the output format."""

    sources: tuple[Path, ...]
    limit: str | None
    out: ui.Output


def _hosts(inventory: InventoryOpt = None, limit: LimitOpt = None,
           as_json: ui.JsonFlag = False, output: ui.OutputOpt = None) -> Hosts:
    out = ui.fmt(as_json, output)  # a --json/-o clash first, as before the inventory
    return Hosts(inventory_sources(inventory), limit, out)


# The options of every fleet command that takes just a host selection and an output format.
on_hosts = shared("on", _hosts)


@app.command()
@ui.documented([
    "fleetgate fleet hosts -i inventory.yml",
    "fleetgate fleet hosts -i inventory.yml --limit '~lab-c0[12]' -o json",
], "0 at least one host matched, 1 none did, 2 bad input")
@on_hosts
def hosts(*, on: Hosts) -> None:
    """The hosts a --limit selects, with their class, address and groups, as Ansible resolves
    them (vars plugins included) and after fleetgate's checks; contacts no host."""
    out, limit = on.out, on.limit
    inv = resolve_inventory(on.sources, limit)
    groups = inv.groups_of()
    rows = {h: {"class": str(hv.get("fleetgate_class") or ""),
                "address": str(hv.get("ansible_host", h)),
                "port": str(hv.get("ansible_port", "")),
                "groups": [g for g in groups.get(h, []) if g not in ("all", "ungrouped")]}
            for h, hv in inv.hostvars.items()}
    if out is ui.Output.json:
        ui.print_json({"inventory": inv.label, "limit": limit, "hosts": rows})
    else:
        ui.print_rows(["host", "class", "address", "port", "groups"],
                      [[h, r["class"], r["address"], r["port"], ",".join(r["groups"])]
                       for h, r in rows.items()], out)
    if not rows:
        raise typer.Exit(1)


@app.command()
@ui.documented([
    "fleetgate fleet ping -i inventory.yml",
    "fleetgate fleet ping -i inventory.yml --limit lab-c01 --json",
])
@on_hosts
def ping(*, on: Hosts) -> None:
    """Ping hosts with Ansible's ping module; exit 1 if any host is unreachable or fails."""
    out = on.out
    result = ansible.run(inventory=on.sources, module="ping", limit=on.limit)
    rows = {h: {"outcome": r.outcome, "message": r.message}
            for h, r in sorted(result.hosts.items())}
    if out is ui.Output.json:
        ui.print_json({"run_dir": str(result.run_dir), "hosts": rows})
    else:
        ui.print_rows(("host", "outcome", "message"),
                      [(h, r["outcome"], r["message"] or "-") for h, r in rows.items()], out)
        ui.console.print(f"run artifacts: {result.run_dir}")
    if not result.hosts:
        ui.console.print("[red]no hosts matched[/red]")
        raise typer.Exit(1)
    if not result.ok:
        raise typer.Exit(1)


@app.command()
@ui.documented([
    "fleetgate fleet facts -i inventory.yml --limit lab-c01",
    "fleetgate fleet facts -i inventory.yml --json",
])
@on_hosts
def facts(*, on: Hosts) -> None:
    """Kernel, OS and class of each host (playbooks/facts.yml); exit 1 if any host fails."""
    out = on.out
    result = ansible.run(inventory=on.sources,
                         playbook=content_root() / "playbooks" / "facts.yml", limit=on.limit)
    rows: dict[str, dict[str, str]] = {}
    for name, hr in sorted(result.hosts.items()):
        info: dict[str, str] = next((r["msg"] for r in reversed(hr.results)
                     if isinstance(r.get("msg"), dict) and "kernel" in r["msg"]), {})
        rows[name] = {"outcome": hr.outcome, "kernel": info.get("kernel", ""),
                      "os": info.get("os", ""), "class": info.get("node_class", ""),
                      "message": hr.message}
    if out is ui.Output.json:
        ui.print_json({"run_dir": str(result.run_dir), "hosts": rows})
    else:
        ui.print_rows(("host", "class", "kernel", "os", "reachable"),
                      [(name, r["class"] or "-", r["kernel"] or "-", r["os"] or "-",
                        "yes" if r["outcome"] in ("ok", "changed") else r["outcome"])
                       for name, r in rows.items()], out)
    if not result.ok or not rows:
        raise typer.Exit(1)


EXTRA_KEY_RE = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
EXTRA_VALUE_RE = re.compile(r"^[A-Za-z0-9._:+~/@%=,-]{0,200}$")


def parse_extra_vars(pairs: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs; both sides must be plain tokens, since values reach commands."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not EXTRA_KEY_RE.fullmatch(key):
            raise BadInput("expected KEY=VALUE with KEY in [a-z0-9_]", source="--extra-vars",
                           field=repr(pair))
        if not EXTRA_VALUE_RE.fullmatch(value):
            raise BadInput("value has characters outside [A-Za-z0-9._:+~/@%=,-]",
                           source="--extra-vars", field=key)
        # Extra vars outrank the inventory's, so a connection variable or a node class given
        # here meets the inventory's own checks (no ProxyCommand, local only on localhost).
        if why := value_problem("", key, value) or _class_problem(key, value):
            raise BadInput(why, source="--extra-vars", field=key)
        out[key] = value
    return out


def _class_problem(key: str, value: str) -> str | None:
    if key != "fleetgate_class" or re.fullmatch(CLASS_NAME_RE, value):
        return None
    return f"fleetgate_class {value!r} is not a node class name ({CLASS_NAME_RE})"


def resolve_playbook(name: str) -> Path:
    if not PLAYBOOK_RE.fullmatch(name):
        raise BadInput("not a playbook name or path", source="PLAYBOOK", field=repr(name))
    path = Path(name)
    if path.suffix not in (".yml", ".yaml"):
        path = content_root() / "playbooks" / f"{name}.yml"
    if not path.is_file():
        raise BadInput("no such playbook", source="PLAYBOOK", field=str(path))
    return path


@app.command()
@ui.documented([
    "fleetgate fleet play smoke-probes -i inventory.yml",
    "fleetgate fleet play apply-class -i inventory.yml --limit lab-c02 -e fleetgate_class=lab-cpu",
])
def play(
    playbook: Annotated[str, typer.Argument(help="Name in playbooks/ (e.g. kernel-update) "
                                                 "or a path.")],
    inventory: InventoryOpt = None,
    limit: LimitOpt = None,
    extra_vars: Annotated[list[str] | None, typer.Option(
        "--extra-vars", "-e", help="KEY=VALUE, repeatable.")] = None,
    as_json: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
) -> None:
    """Run a playbook through ansible-runner; exit 1 if any host fails or is unreachable."""
    out = ui.fmt(as_json, output)
    path = resolve_playbook(playbook)
    result = ansible.run(inventory=inventory_sources(inventory), playbook=path, limit=limit,
                         extravars=parse_extra_vars(extra_vars or []))
    rows = {h: {"outcome": r.outcome, "task": r.task, "message": r.message}
            for h, r in sorted(result.hosts.items())}
    if out is ui.Output.json:
        ui.print_json({"run_dir": str(result.run_dir), "status": result.status, "rc": result.rc,
                       "hosts": rows})
    else:
        ui.print_rows(("host", "outcome", "failed task", "message"),
                      [(h, r["outcome"], r["task"] or "-", r["message"] or "-")
                       for h, r in rows.items()], out)
        if result.error:
            ui.console.print(f"[red]run error:[/red] {ui.esc(result.error)}")
        ui.console.print(f"run artifacts: {result.run_dir}")
    if not result.ok or not rows:
        raise typer.Exit(1)


@app.command()
@ui.documented([
    "fleetgate fleet drift -i inventory.yml",
    "fleetgate fleet drift -i inventory.yml --json",
])
@on_hosts
def drift(*, on: Hosts) -> None:
    """Compare each host's live versions and devices with its class and the manifest it
    carries, and the devices of hosts within one class. Exit 0 clean, 1 drift, 4 a host
    could not be read (and nothing drifted)."""
    out = on.out
    sel = select(on.sources, on.limit)
    run_dir, states = read_states(sel)
    hosts = [host_drift(s, sel.classes[s.host]) for s in states]
    hardware = class_hardware(states)
    mixed = [d for hw in hardware for d in mixed_drift(hw)]
    if out is ui.Output.json:
        ui.print_json({"run_dir": str(run_dir),
                       "hosts": {h.host: drift_dict(h) for h in hosts},
                       "classes": {hw.name: {"hosts": hw.hosts, "mixed_hardware": hw.mixed,
                                             "variants": hw.variants} for hw in hardware}})
    else:
        ui.print_rows(("host", "class", "status", "drift"),
                      [(h.host, h.class_name or "-", h.status,
                        "; ".join(d.message for d in h.drift) or h.reason or "-") for h in hosts],
                      out)
        for d in mixed:
            ui.console.print(f"[red]mixed hardware:[/red] {ui.esc(d.message)}")
        ui.console.print(f"run artifacts: {run_dir}")
    if mixed or any(h.status == "drift" for h in hosts):
        raise typer.Exit(1)
    if any(h.status == "inconclusive" for h in hosts):
        raise typer.Exit(4)


@app.command("cache-key")
@ui.documented([
    "fleetgate fleet cache-key -i inventory.yml lab-c01",
    "fleetgate fleet cache-key -i inventory.yml lab-c01 --engine torch=2.4.1 -o json",
])
def cache_key_command(
    host: Annotated[str, typer.Argument(help="One inventory host.")],
    inventory: InventoryOpt = None,
    engine: Annotated[list[str] | None, typer.Option(
        "--engine", help="NAME=VERSION of the engine or compiler, repeatable "
                         "(tensorrt=10.3, torch=2.4.1, triton=3.0.0).")] = None,
    runtime: Annotated[str | None, typer.Option(
        "--runtime", help="cuda=X.Y or rocm=X.Y the workload runs (default: the class's "
                          "userland pin).")] = None,
    as_json: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
) -> None:
    """Print the cache key for engine and compile caches on HOST: a short sha256 over device
    model, PCI ID, compute capability, driver, CUDA/ROCm runtime and engine versions."""
    out = ui.fmt(as_json, output)
    if not HOST_RE.fullmatch(host):
        raise BadInput("not a single host name", source="HOST", field=repr(host))
    engines = parse_engines(engine or [])
    sel = select(inventory_sources(inventory), host)
    if host not in sel.classes:
        raise BadInput("no such host in the inventory", source=sel.inventory.label, field=host)
    nc = sel.classes[host]
    if nc is None:
        raise BadInput("the host has no fleetgate_class, so no backend to key by",
                       source=host, field="fleetgate_class")
    rt = runtime_of(nc, runtime)
    run_dir, states = read_states(Selection(sel.inventory, host, {host: nc}))
    state = next(s for s in states if s.host == host)
    if state.outcome not in ("ok", "changed") or not state.devices:
        ui.console.print(f"[yellow]{ui.esc(host)}: could not read its devices: "
                         f"{ui.esc(state.outcome)} {ui.esc(state.message)}[/yellow]")
        raise typer.Exit(4)
    distinct = sorted({(d.model, d.pci_id, d.compute_capability, d.driver)
                       for d in state.devices}, key=str)
    if len(distinct) > 1:
        ui.console.print(f"[red]{ui.esc(host)} mixes devices ({ui.esc(distinct)}): one cache per "
                         "device kind is needed, not one per host[/red]")
        raise typer.Exit(1)
    key = cache_key(nc.accelerator.backend, state.devices[0], rt, engines)
    if out is ui.Output.json:
        ui.print_json({"host": host, "class": nc.name, "key": key.key,
                       "components": key.components, "run_dir": str(run_dir)})
    else:
        print(key.key)
