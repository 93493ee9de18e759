"""The rollout plan: a YAML file that says what changes, where, in which order, and when to stop.

Validated like a node class (strict types, unknown keys rejected, one-line errors naming the
field). Paths to playbooks are resolved against the repository, never taken from anywhere a
plan could smuggle a command in; extra vars are checked against the same key/value rules as
`fleet play -e`, and none may set how Ansible reaches a host (rollout/var_policy.py). A
secret is never in a plan: `secret_vars` says where its value is read at run time.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from fleetgate.errors import BadInput
from fleetgate.rollout.canary import CanarySection
from fleetgate.rollout.target import SHA256_RE, Target
from fleetgate.rollout.var_policy import check_key
from fleetgate.runner import redact
from fleetgate.runner.secret_vars import SecretRef
from fleetgate.site import content_root, current_site
from fleetgate.smoke.thresholds import CHECKS, Check
from fleetgate.spec.loader import (
    class_files,
    classes_dir,
    load_all,
    load_model,
    resolve_class,
)
from fleetgate.spec.schema import CLASS_NAME_RE, NodeClass

PLAN_NAME_RE = r"^[a-z0-9][a-z0-9-]{0,62}$"
# Ansible host/group patterns that reach `--limit`: the wrapper's own character class.
PATTERN_RE = r"^[A-Za-z0-9_.:*!&\[\]-]{1,200}$"
PLAYBOOK_RE = r"^[A-Za-z0-9_./-]{1,200}\.ya?ml$"
VAR_KEY_RE = r"^[a-z_][a-z0-9_]{0,63}$"
DOMAIN_KEY_RE = r"^[a-z_][a-z0-9_]{0,31}$"
HHMM_RE = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
# A budget: a count (2) or a share of the hosts it applies to ("10%").
BUDGET_RE = r"^([0-9]{1,3}(\.[0-9]+)?%|[0-9]{1,6})$"
STEP_RE = r"^[0-9]{1,3}(\.[0-9]+)?%$"
SAFE_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,:+~=@/ -]{0,200}$")

_CLASS = CLASS_NAME_RE.strip("^$")
IMAGE_REF_RE = rf"^{_CLASS}:[1-9][0-9]{{0,5}}$"
IMAGE_NAME_RE = rf"^{_CLASS}-[1-9][0-9]{{0,5}}$"
REIMAGE_PLAYBOOK = "playbooks/reimage.yml"
# An image's AMIs by region (its manifest's image.ec2_amis, where a Packer amazon-ebs build
# published it); the same patterns guard the values again in playbooks/tasks/reimage-ec2.yml,
# where they reach the AWS CLI.
AWS_REGION_RE = r"^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$"
AMI_ID_RE = r"^ami-[0-9a-f]{8,17}$"

PlanName = Annotated[str, StringConstraints(pattern=PLAN_NAME_RE)]
Pattern = Annotated[str, StringConstraints(pattern=PATTERN_RE)]
Playbook = Annotated[str, StringConstraints(pattern=PLAYBOOK_RE)]
DomainKey = Annotated[str, StringConstraints(pattern=DOMAIN_KEY_RE)]
RegionStr = Annotated[str, StringConstraints(pattern=AWS_REGION_RE)]
AmiStr = Annotated[str, StringConstraints(pattern=AMI_ID_RE)]


BUDGET_HELP = "a failure budget is a count (0, 2) or a percentage of the hosts ('10%')"
STEP_HELP = "a step is a host count (1, 2) or a percentage of the hosts ('25%', at most 100%)"


def _share(pattern: str, what: str) -> Callable[[str], str]:
    """A count or percentage written as a string, checked with a reason an operator reads
    (pydantic's would quote the pattern)."""
    def check(v: str) -> str:
        if not re.fullmatch(pattern, v):
            raise ValueError(f"{v!r} is not allowed: {what}")
        if v.endswith("%") and float(v[:-1]) > 100:
            raise ValueError(f"{v} is over 100%")
        return v
    return check


def _at_least(low: int, what: str) -> Callable[[int], int]:
    def check(v: int) -> int:
        if v < low:
            raise ValueError(f"{v} is not allowed: {what}")
        return v
    return check


Budget = (Annotated[str, AfterValidator(_share(BUDGET_RE, BUDGET_HELP))]
          | Annotated[int, AfterValidator(_at_least(0, BUDGET_HELP))])
Step = (Annotated[int, AfterValidator(_at_least(1, STEP_HELP))]
        | Annotated[str, AfterValidator(_share(STEP_RE, STEP_HELP))])
Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# A variable name that says it holds a credential (its last word), e.g. db_password,
# registry_token, aws_secret_access_key; not `bypass_cache` or `token_budget`. The words are
# the redactor's, so what a plan may not name is what output masks.
SECRET_NAME_RE = re.compile(rf"(?:^|_)(?:{redact.CREDENTIAL_WORDS})$")


def _check_var_key(key: Any, where: str) -> None:
    """A name a plan may give Ansible: a lower-case identifier, and nothing that reconfigures
    how hosts are reached or shadows Ansible's own variables (rollout/var_policy.py)."""
    if not isinstance(key, str) or not re.fullmatch(VAR_KEY_RE, key):
        raise ValueError(f"{where} key {key!r} is not a lower-case identifier")
    check_key(key, where)


def _check_vars(value: dict[str, Any], where: str) -> dict[str, Any]:
    """Extra vars reach Ansible as data, but they also end up in templates and command lines
    of roles: only scalars (and lists of scalars) of a conservative character set get in."""
    def ok_scalar(v: Any) -> bool:
        if isinstance(v, bool | int | float):
            return True
        return isinstance(v, str) and SAFE_VALUE_RE.fullmatch(v) is not None

    for key, v in value.items():
        _check_var_key(key, where)
        # Extra vars are kept as written (artifact, journal, batch specs) and never masked by
        # name: a vaulted value, or one named like a credential, belongs in secret_vars.
        if isinstance(v, dict) and set(v) == {"vault"}:
            raise ValueError(f"{where}.{key}: an ansible-vault value is a secret: put it in "
                             "secret_vars (the same `!vault |`), which reaches the run and "
                             "no file")
        if SECRET_NAME_RE.search(key):
            raise ValueError(f"{where}.{key}: the name says it holds a credential, and extra "
                             "vars are stored as written: give it as secret_vars (env, file "
                             "or !vault), which reaches the run and no file")
        items = v if isinstance(v, list) else [v]
        if not all(ok_scalar(i) for i in items):
            raise ValueError(f"{where}.{key}: only numbers, booleans and strings of "
                             "[A-Za-z0-9_.,:+~=@/ -] (or lists of them) are allowed")
    return value


class ImagePin(_Strict):
    """The image an image change re-images to, as planning found it in the image store."""

    name: Annotated[str, StringConstraints(pattern=IMAGE_NAME_RE)]
    artifact_sha256: Annotated[str, StringConstraints(pattern=SHA256_RE)]
    manifest_sha256: Annotated[str, StringConstraints(pattern=SHA256_RE)]
    # Region -> the AMI the image was published as there (its manifest's image.ec2_amis):
    # what the ec2 provider replaces a host's root volume from. Empty for an image never
    # published to EC2.
    ec2_amis: dict[RegionStr, AmiStr] = Field(default_factory=dict)


class Change(_Strict):
    # What the change is: a playbook, or a golden image (CLASS:VERSION from the image store)
    # that playbooks/reimage.yml puts on each host. `image_pin` is planning's record of that
    # image; a plan leaves it out.
    playbook: Playbook | None = None
    image: Annotated[str, StringConstraints(pattern=IMAGE_REF_RE)] | None = None
    image_pin: ImagePin | None = None
    extra_vars: dict[str, Any] = Field(default_factory=dict)
    # Where each secret's value comes from at run time ({env: NAME} or {file: /path}); the
    # plan, its artifact and the journal only ever hold these references
    # (runner/secret_vars.py).
    secret_vars: dict[str, SecretRef] = Field(default_factory=dict)
    # A node-class directory for this run only: how a new class version (a new golden image's
    # pins) reaches the hosts of one batch while the inventory still says the old one.
    classes: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./-]{1,200}$")] | None = None
    target: Target = Field(default_factory=Target)
    timeout_s: Annotated[int, Field(ge=10, le=86400)] = 3600

    @model_validator(mode="after")
    def _vars(self) -> Change:
        if (self.playbook is None) == (self.image is None):
            raise ValueError("give either a playbook or an image (CLASS:VERSION), not "
                             + ("both" if self.playbook else "neither"))
        if self.image_pin is not None and self.image is None:
            raise ValueError("image_pin belongs to an image change")
        # Planning fills the target in beside the pin; a plan that writes one itself is refused.
        written = not self.target.empty and self.image_pin is None
        if self.image is not None and (self.classes is not None or written
                                       or self.target.from_class):
            raise ValueError("an image change takes its target from the image's manifest; "
                             "drop target and classes")
        _check_vars(self.extra_vars, "extra_vars")
        for key in self.secret_vars:
            _check_var_key(key, "secret_vars")
            if key in self.extra_vars:
                raise ValueError(f"secret_vars.{key}: also set in extra_vars; give it once")
        return self

    @property
    def run_playbook(self) -> str:
        """The playbook a batch of this change runs."""
        return self.playbook or REIMAGE_PLAYBOOK


def change_label(change: dict[str, Any]) -> str:
    """A change as an artifact holds it, named for an operator: its playbook, or its image
    with the artifact digest planning pinned."""
    if change.get("image"):
        pin = change.get("image_pin") or {}
        sha = str(pin.get("artifact_sha256", ""))[:12]
        return f"image {change['image']}" + (f" (artifact sha256 {sha}…)" if sha else "")
    return str(change.get("playbook", "?"))


class Targets(_Strict):
    inventory: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./~-]{1,300}$")]
    node_class: Annotated[str, StringConstraints(pattern=CLASS_NAME_RE)] | None = Field(
        default=None, alias="class")
    patterns: list[Pattern] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class Waves(_Strict):
    """Either inventory pools in order (`pools`), or generated cumulative steps (`steps`):
    [1, 2, "25%", "100%"] means 1 host, then 2 in total, then a quarter, then the rest."""

    pools: list[Pattern] | None = None
    steps: list[Step] | None = None
    diversity: list[DomainKey] = Field(default_factory=lambda: ["zone", "rack"])

    @model_validator(mode="after")
    def _one_kind(self) -> Waves:
        if (self.pools is None) == (self.steps is None):
            raise ValueError("give exactly one of pools or steps")
        if self.pools is not None and (not self.pools or len(set(self.pools)) != len(self.pools)):
            raise ValueError("pools must be a non-empty list without repeats")
        if self.steps is not None and not self.steps:
            raise ValueError("steps must not be empty")
        return self


class BudgetRule(_Strict):
    """`max_failed` failures are tolerated; one more halts the rollout (halt when failed >
    max_failed). Percentages are of the hosts the rule covers, rounded down."""

    max_failed: Budget = 0


class DomainBudget(BudgetRule):
    key: DomainKey = "rack"


class Budgets(_Strict):
    per_wave: BudgetRule = Field(default_factory=BudgetRule)
    total: BudgetRule = Field(default_factory=BudgetRule)
    per_domain: DomainBudget | None = None


class Inconclusive(_Strict):
    policy: Literal["halt", "retry"] = "halt"
    retries: Annotated[int, Field(ge=0, le=10)] = 2


class Gates(_Strict):
    checks: list[Check] = Field(default_factory=lambda: list[Check](["discovery", "stack"]))
    # Re-measure a failed gate this many times before believing it (a flaky probe).
    retries: Annotated[int, Field(ge=0, le=5)] = 0
    inconclusive: Inconclusive = Field(default_factory=Inconclusive)
    # Relative thresholds against hosts of later waves (same class, still on the old
    # version), measured before each wave; 0 = absolute thresholds and fleet median only.
    baseline_hosts: Annotated[int, Field(ge=0, le=50)] = 0
    # pytest processes per smoke run (smoke/runner.py): each measures its share of the hosts
    # one after another, so fewer processes cost less start-up and measure with less
    # contention, more finish a big batch sooner.
    forks: Annotated[int, Field(ge=1, le=500)] = 8

    @model_validator(mode="after")
    def _unique(self) -> Gates:
        if len(set(self.checks)) != len(self.checks):
            raise ValueError("checks must not repeat")
        return self


class Soak(_Strict):
    seconds: Annotated[int, Field(ge=0, le=7 * 86400)] = 0
    rerun_smoke: bool = True


class Window(_Strict):
    """Maintenance window: no host starts outside it; a host already started finishes."""

    start: Annotated[str, StringConstraints(pattern=HHMM_RE)]
    end: Annotated[str, StringConstraints(pattern=HHMM_RE)]
    days: list[Weekday] = Field(default_factory=lambda: list(WEEKDAYS))
    timezone: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_+/-]{1,64}$")] = "UTC"
    when_closed: Literal["wait", "halt"] = "wait"

    @model_validator(mode="after")
    def _tz(self) -> Window:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {self.timezone!r}") from None
        if self.start == self.end:
            raise ValueError("start and end are equal; omit the window for always-open")
        return self

    def is_open(self, now: dt.datetime) -> bool:
        import zoneinfo

        local = now.astimezone(zoneinfo.ZoneInfo(self.timezone))
        hm = local.strftime("%H:%M")
        day = WEEKDAYS[local.weekday()]
        if self.start < self.end:
            return day in self.days and self.start <= hm < self.end
        # Over midnight: the part after midnight belongs to the window that opened the day before.
        if hm >= self.start:
            return day in self.days
        prev = WEEKDAYS[(local.weekday() - 1) % 7]
        return hm < self.end and prev in self.days


class Approvals(_Strict):
    before_waves: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list)


class Drain(_Strict):
    """Take each host out of service before its change and back after every gate passed
    (playbooks/drain.yml, undrain.yml: Slurm from the slurmctld host, Kubernetes from a
    control host). A host that fails stays drained: that is what `failed_held` holds it with."""

    drain_playbook: Playbook = "playbooks/drain.yml"
    undrain_playbook: Playbook = "playbooks/undrain.yml"
    # How long a host's work may take to leave (Slurm jobs to end, pods to be evicted). Past
    # it the drain has failed: nothing is applied, the host is put back in service, and it
    # counts against the budgets like any failed host.
    timeout_s: Annotated[int, Field(ge=1, le=7 * 86400)] = 600


# Without a drain section a failed host is only recorded as failed_held: nothing takes it out
# of its scheduler. `drain: none` says that is intended (hosts no scheduler runs work on).
NO_DRAIN = "none"
NO_DRAIN_WARNING = ("the plan has no drain section: a failed host stays in service (its "
                    "scheduler keeps sending it work); add `drain: {}` to drain hosts, or "
                    "`drain: none` to say they need none")


def drain_of(plan: RolloutPlan) -> Drain | None:
    """The plan's drain section, or None when hosts are not drained (no section, or none)."""
    return plan.drain if isinstance(plan.drain, Drain) else None


def drain_warnings(drain: Drain | str | dict[str, Any] | None) -> list[str]:
    """What `rollout plan` warns about a plan's drain section (a model, or an artifact's)."""
    return [NO_DRAIN_WARNING] if drain is None else []


class Rollback(Change):
    """The way back: its target is the old version, checked like the change's."""

    @model_validator(mode="after")
    def _no_image(self) -> Rollback:
        if self.image is not None:
            raise ValueError("an image change rolls each host back to the image it ran "
                             "before; a rollback section names a playbook")
        return self


# An execution node's inventory name: it reaches --limit-free ssh argv and file names.
EXEC_NODE_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
ExecNodeName = Annotated[str, StringConstraints(pattern=EXEC_NODE_RE)]
DomainValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class Execution(_Strict):
    """Which execution node runs a host's batches: its value of one failure domain picks the
    node (`nodes`: domain value -> a member of the inventory group fleetgate_execution_nodes).
    Per domain, so that losing one node halts one zone's batches, not the rollout's."""

    domain: DomainKey = "zone"
    nodes: dict[DomainValue, ExecNodeName]

    @model_validator(mode="after")
    def _some(self) -> Execution:
        if not self.nodes:
            raise ValueError("nodes must map at least one domain value to an execution node")
        return self


class RolloutPlan(_Strict):
    name: PlanName
    description: str = ""
    change: Change
    rollback: Rollback | None = None
    targets: Targets
    waves: Waves
    concurrency: Annotated[int, Field(ge=1, le=500)] = 5
    budgets: Budgets = Field(default_factory=Budgets)
    gates: Gates = Field(default_factory=Gates)
    soak: Soak = Field(default_factory=Soak)
    window: Window | None = None
    on_failure: Literal["halt", "rollback"] = "halt"
    approvals: Approvals = Field(default_factory=Approvals)
    drain: Drain | Literal["none"] | None = None
    # Canary analysis: canaries' smoke metrics against baseline hosts (or themselves before
    # the change), judged per metric; see rollout/canary.py.
    canary: CanarySection | None = None
    # Batches run on execution nodes (ansible-runner worker over SSH) instead of here.
    execution: Execution | None = None

    @model_validator(mode="after")
    def _consistent(self) -> RolloutPlan:
        if self.change.image is not None and self.rollback is not None:
            raise ValueError("an image change rolls each host back to the image it ran before "
                             "the change; drop the rollback section")
        if self.on_failure == "rollback" and self.rollback is None and self.change.image is None:
            raise ValueError("on_failure is rollback but the plan has no rollback section")
        if self.canary is not None:
            unknown = sorted({m.name.split(".", 1)[0] for m in self.canary.metrics}
                             - set(CHECKS))
            if unknown:
                raise ValueError(f"canary metrics name CHECK.FIELD; unknown check "
                                 f"{', '.join(unknown)} (known: {', '.join(CHECKS)})")
            if self.canary.mode == "baseline" and self.gates.baseline_hosts < 1:
                raise ValueError("canary analysis against a baseline needs "
                                 "gates.baseline_hosts >= 1")
        return self


def _plain_relative(rel: str, *, source: Path | str, field: str) -> Path:
    p = Path(rel)
    if not rel or p.is_absolute() or ".." in p.parts:
        raise BadInput(f"{rel!r} must be a relative path without '..'", source=source,
                       field=field)
    return p


def playbook_path(rel: str, *, source: Path | str, field: str) -> Path:
    """A playbook a plan names: one of fleetgate's own (its playbooks/) or one in the site's
    playbook directories (fleetgate.yml `playbooks`), the site's first. The plan cannot point
    the controller at any other file; checked when the plan is made and again wherever an
    artifact is run, since the tree may have changed in between."""
    _plain_relative(rel, source=source, field=field)
    site, content = current_site(), content_root()
    places = [(site.root, site.playbook_dirs), (content, [(content / "playbooks").resolve()])]
    inside = False
    for base, allowed in places:
        raw = base / rel
        if not any(raw.is_relative_to(a) for a in allowed):
            continue
        inside = True
        p = raw.resolve()
        if not any(p.is_relative_to(a) for a in allowed):  # a symlink planted in the tree
            raise BadInput(f"{rel} leads outside the playbook directories ({p})",
                           source=source, field=field)
        if p.is_file():
            return p
    if not inside:
        dirs = ", ".join(str(d.relative_to(site.root)) for d in site.playbook_dirs)
        raise BadInput(f"must be a playbook under fleetgate's playbooks/ or the site's "
                       f"playbook directories ({dirs})", source=source, field=field)
    raise BadInput(f"no such playbook {rel}", source=source, field=field)


def classes_path(rel: str, *, source: Path | str | None = None, field: str = "classes") -> Path:
    """A class directory a plan names: inside the site, and every class in it valid."""
    _plain_relative(rel, source=source or "plan", field=field)
    root = current_site().root
    p = (root / rel).resolve()
    if not p.is_relative_to(root) or not p.is_dir():
        raise BadInput("must be a directory of node classes inside the site", source=source,
                       field=field)
    load_all(class_files([p]))  # a broken class is bad input now, not an Ansible error later
    return p


def _class_target(target: Target, nc: NodeClass, *, source: Path, field: str) -> Target:
    """`target.from_class` filled in from the class; an explicit value that disagrees is an
    error, not a silent override."""
    kernel = None if nc.lab is not None and nc.lab.kind == "container" else nc.kernel.abi
    for key, have, want in (
            ("kernel_release", target.kernel_release, kernel),
            ("manifest.class_version", target.manifest.get("class_version"), nc.version)):
        if have is not None and want is not None and have != want:
            raise BadInput(f"{key} {have!r} contradicts class {nc.name} version {nc.version} "
                           f"({want!r}); drop it or from_class", source=source,
                           field=f"{field}.target.{key}")
    return target.model_copy(update={
        "kernel_release": kernel or target.kernel_release,
        "manifest": {**target.manifest, "class_version": nc.version}})


def _with_class_target(plan: RolloutPlan, section: Change, directory: Path | None, *,
                       source: Path, field: str) -> Change:
    """`directory`: the section's own class directory (already checked), else the inventory's."""
    if not section.target.from_class:
        return section
    if plan.targets.node_class is None:
        raise BadInput("from_class needs targets.class to name the class", source=source,
                       field=f"{field}.target.from_class")
    try:
        _, nc = resolve_class(plan.targets.node_class, directory or classes_dir())
    except BadInput as exc:
        raise BadInput(f"targets.class: {exc.reason}", source=source,
                       field=f"{field}.target.from_class") from None
    target = _class_target(section.target, nc, source=source, field=field)
    return section.model_copy(update={"target": target})


def _with_image(plan: RolloutPlan, *, source: Path) -> Change:
    """An image change with its image pinned and its target derived from the image's manifest.
    Run again on an artifact, it finds the same pin, or refuses: an image rebuilt since
    planning (--force) is not the one reviewed."""
    from fleetgate.rollout import image_change  # the image store is needed only here

    c = plan.change
    assert c.image is not None
    pinned = image_change.pin(c.image, plan.targets.node_class, source=source,
                              field="change.image")
    if c.image_pin is not None and c.image_pin.model_dump() != pinned:
        raise BadInput(f"image {pinned['name']} is not the one planned (its artifact or "
                       f"manifest changed since: rebuilt?); run `rollout plan` again",
                       source=source, field="change.image_pin")
    return c.model_copy(update={"image_pin": ImagePin(**pinned),
                                "target": image_change.target_of(pinned)})


def load_plan(path: Path) -> RolloutPlan:
    return check_plan(load_model(path, RolloutPlan, "rollout plan"), path)


def check_plan(plan: RolloutPlan, path: Path) -> RolloutPlan:
    """What a valid plan must also pass against the tree (playbooks, class directories, the
    class a target comes from), with `from_class` targets filled in. Planning runs it, and so
    does loading an artifact (rollout/artifact.py): the tree may have moved in between, and
    an artifact is a file someone could have edited."""
    playbook_path(plan.change.run_playbook, source=path, field="change.playbook")
    if plan.change.image is not None:
        update: dict[str, Any] = {"change": _with_image(plan, source=path)}
    else:
        change_dir = (classes_path(plan.change.classes, source=path, field="change.classes")
                      if plan.change.classes is not None else None)
        update = {"change": _with_class_target(plan, plan.change, change_dir, source=path,
                                               field="change")}
    if plan.rollback is not None:
        playbook_path(plan.rollback.run_playbook, source=path, field="rollback.playbook")
        rollback_dir = (classes_path(plan.rollback.classes, source=path,
                                     field="rollback.classes")
                        if plan.rollback.classes is not None else None)
        update["rollback"] = _with_class_target(plan, plan.rollback, rollback_dir, source=path,
                                                field="rollback")
    plan = plan.model_copy(update=update)
    if (drain := drain_of(plan)) is not None:
        playbook_path(drain.drain_playbook, source=path, field="drain.drain_playbook")
        playbook_path(drain.undrain_playbook, source=path, field="drain.undrain_playbook")
    return plan


def inventory_path(plan: RolloutPlan, plan_file: Path, override: Path | None) -> Path:
    """`-i` wins; otherwise the plan's inventory, relative to the plan file."""
    if override is not None:
        p = override
    else:
        raw = Path(plan.targets.inventory).expanduser()
        p = raw if raw.is_absolute() else plan_file.parent / raw
    # A file or a directory (group_vars, host_vars, several files): whatever Ansible reads.
    if not (p.is_file() or p.is_dir()):
        raise BadInput("no such inventory file or directory", source=str(p),
                       field=None if override else "targets.inventory")
    return p.resolve()


def budget_count(rule: Budget, covered: int) -> int:
    """A budget as a count of tolerated failures among `covered` hosts."""
    if isinstance(rule, int):
        return rule
    if rule.endswith("%"):
        return int(float(rule[:-1]) * covered // 100)
    return int(rule)


def describe_budget(rule: Budget, covered: int) -> str:
    n = budget_count(rule, covered)
    shown = f"{rule} of {covered} = {n}" if isinstance(rule, str) and rule.endswith("%") else str(n)
    return f"tolerates {shown} failed; halts when failed > {n}"
