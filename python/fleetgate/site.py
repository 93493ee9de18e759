"""Where fleetgate's two kinds of files live: the tool's own content, and the operator's site.

- **Content** (`content_root()`): the Ansible roles, playbooks, plugins and Packer templates
  fleetgate runs. They come with the tool: the source checkout when fleetgate runs from one,
  the copy inside the installed wheel otherwise. `FLEETGATE_HOME` points at another copy.
- **Site** (`current_site()`): the operator's own repository of node classes, plans and
  inventories, reviewed like any infrastructure code, plus where state and images go. A site is
  a directory holding `fleetgate.yml`. It is taken from `--site DIR`, else `FLEETGATE_SITE`,
  else the nearest `fleetgate.yml` from the working directory up. The project's own checkout
  is one such site (its classes under inventory/classes, its plans under examples/), so the
  demo and the tests run the way an operator's repository does.

Paths a site names for classes and plans stay inside the site: a reviewed repository cannot
be pointed at files nobody reviewed. State and images may be anywhere (a CI runner keeps its
journal on a persistent volume), and each has an environment variable that overrides it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from fleetgate.errors import BadInput
from fleetgate.inputs import file_kind

SITE_FILE = "fleetgate.yml"
SITE_ENV = "FLEETGATE_SITE"
# The environment variables that override a site's paths, as `--help` names them.
PATH_ENV = {
    "site": SITE_ENV,
    "content": "FLEETGATE_HOME",
    "classes": "FLEETGATE_CLASSES_DIR",
    "state": "FLEETGATE_STATE_DIR",
    "images": "FLEETGATE_IMAGES_DIR",
    "lab": "FLEETGATE_LAB_DIR",
}


# Linux's limits (linux/limits.h): no file system takes a longer path or file name, so a
# longer one could only fail later, as an OSError from whichever command first used it.
PATH_MAX = 4096
NAME_MAX = 255


def _fits(value: str) -> str:
    if "\x00" in value:
        raise ValueError("a NUL byte in a path")
    if len(os.fsencode(value)) >= PATH_MAX:
        raise ValueError(f"a path of {len(value)} characters; a path is under {PATH_MAX} bytes")
    long = next((p for p in Path(value).parts if len(os.fsencode(p)) > NAME_MAX), None)
    if long is not None:
        raise ValueError(f"a path component of {len(long)} characters ({long[:20]!r}...); "
                         f"a file name is at most {NAME_MAX} bytes")
    return value


def _relative(value: str) -> str:
    p = Path(value)
    if not value or p.is_absolute() or ".." in p.parts:
        raise ValueError("must be a path inside the site (relative, without '..')")
    return _fits(value)


def _anywhere(value: str) -> str:
    if not value or "\x00" in value or any(c in value for c in "\n\r"):
        raise ValueError("must be a path")
    return _fits(value)


InsidePath = Annotated[str, AfterValidator(_relative)]
AnyPath = Annotated[str, AfterValidator(_anywhere)]


class SecurityConfig(BaseModel):
    """`security:` who may vouch for plan artifacts and approvals (rollout/signing.py)."""

    # Strict: a security switch is true or false, never a string that happens to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    require_signed_artifacts: bool = Field(
        False, description="`rollout start` runs only artifacts signed by an allowed signer")
    require_signed_approvals: bool = Field(
        False, description="`rollout approve` needs --sign-key, verified by allowed signers")
    allowed_signers: InsidePath | None = Field(
        None, description="OpenSSH allowed_signers file of the keys that may sign")

    @model_validator(mode="after")
    def _signers(self) -> SecurityConfig:
        if (self.require_signed_artifacts or self.require_signed_approvals) and (
                self.allowed_signers is None):
            raise ValueError("requiring signatures needs allowed_signers to check them with")
        return self


class SiteConfig(BaseModel):
    """`fleetgate.yml`: every key optional but `fleetgate`, the file's format version."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fleetgate: Literal[1] = Field(description="format version of this file")
    classes: InsidePath = Field("classes", description="node classes")
    plans: InsidePath = Field("plans", description="rollout plans")
    playbooks: list[InsidePath] = Field(
        default_factory=lambda: ["playbooks"],
        description="directories a plan may name playbooks from, besides fleetgate's own")
    inventory: list[InsidePath] = Field(
        default_factory=list, description="default inventory sources, for commands given no -i")
    state: AnyPath = Field(".fleetgate", description="journal, leases and run directories")
    images: AnyPath = Field(".fleetgate/images", description="golden image store")
    security: SecurityConfig = Field(default_factory=SecurityConfig,
                                     description="signed plan artifacts and approvals")


@dataclass(frozen=True)
class Site:
    root: Path
    config: SiteConfig

    @property
    def file(self) -> Path:
        return self.root / SITE_FILE

    def _inside(self, rel: str, key: str) -> Path:
        # Checked again here, not only by the model: a symlink inside the site may lead out.
        p = (self.root / rel).resolve()
        if not p.is_relative_to(self.root):
            raise BadInput(f"{rel} leads outside the site ({p})", source=self.file, field=key)
        return p

    def _override(self, key: str) -> Path | None:
        env = os.environ.get(PATH_ENV[key])
        return Path(env).resolve() if env else None

    @property
    def classes_dir(self) -> Path:
        return self._override("classes") or self._inside(self.config.classes, "classes")

    @property
    def plans_dir(self) -> Path:
        return self._inside(self.config.plans, "plans")

    @property
    def playbook_dirs(self) -> list[Path]:
        return [self._inside(d, "playbooks") for d in self.config.playbooks]

    @property
    def inventory(self) -> list[Path]:
        return [self._inside(i, "inventory") for i in self.config.inventory]

    @property
    def allowed_signers(self) -> Path | None:
        rel = self.config.security.allowed_signers
        return None if rel is None else self._inside(rel, "security.allowed_signers")

    @property
    def state_dir(self) -> Path:
        env = self._override("state")
        path = env or (self.root / self.config.state).resolve()
        # Checked here, once for every user (journal, leases, runs): a file in its place
        # would otherwise surface as a NotADirectoryError deep inside one of them.
        if path.exists() and not path.is_dir():
            raise BadInput("the state directory is not a directory", source=path,
                           field=PATH_ENV["state"] if env else f"{SITE_FILE}: state")
        return path

    @property
    def images_dir(self) -> Path:
        return self._override("images") or (self.root / self.config.images).resolve()

    @property
    def lab_dir(self) -> Path:
        return self._override("lab") or self.state_dir / "lab"


def load_site(root: Path) -> Site:
    # spec.loader finds its classes through the site, so its YAML reader is imported here.
    from fleetgate.spec.loader import load_model

    return Site(root.resolve(), load_model(root / SITE_FILE, SiteConfig, "site file"))


def content_root() -> Path:
    """fleetgate's own Ansible content and Packer templates."""
    env = os.environ.get(PATH_ENV["content"])
    if env:
        return Path(env).resolve()
    package = Path(__file__).resolve().parent
    checkout = package.parents[1]  # python/fleetgate -> the repository
    if (checkout / "playbooks" / "node.yml").is_file():
        return checkout
    return package / "content"  # the wheel's copy (pyproject: package-data)


def content_env() -> dict[str, str]:
    """What every Ansible process fleetgate starts (runner, ansible-inventory, Packer's
    provisioner) must see: fleetgate's ansible.cfg and the site's node classes, which the
    fleetgate_class vars plugin loads."""
    root = content_root()
    return {"FLEETGATE_HOME": str(root), "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "FLEETGATE_CLASSES_DIR": str(current_site().classes_dir)}


def find_site_root(start: Path) -> Path | None:
    """The nearest directory from `start` up that holds a fleetgate.yml. One that is there but
    is not a regular file is bad input, not a reason to walk on to some outer site."""
    for d in (start, *start.parents):
        f = d / SITE_FILE
        try:
            st = f.lstat()
            if stat.S_ISLNK(st.st_mode):
                st = f.stat()
        except FileNotFoundError:
            if f.is_symlink():
                raise BadInput("is a symlink to nothing, not a site file", source=f) from None
            continue
        except OSError as exc:
            raise BadInput(f"cannot read: {exc.strerror or exc}", source=f) from None
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"is {file_kind(st.st_mode)}, not a regular file; a site is a "
                           f"directory holding a {SITE_FILE} file", source=f)
        return d
    return None


@cache
def _site_at(root: Path, _mtime: int) -> Site:
    return load_site(root)


def current_site() -> Site:
    """The site this command works in (see the module's docstring for the order)."""
    env = os.environ.get(SITE_ENV)
    if env:
        root = Path(env).resolve()
        if not (root / SITE_FILE).is_file():
            raise BadInput(f"no {SITE_FILE} there (run `fleetgate init {env}` to make one)",
                           source=env, field=SITE_ENV + " / --site")
    else:
        found = find_site_root(Path.cwd().resolve())
        if found is None:
            # Outside any site, the tool's own checkout (its lab and examples) is the site.
            content = content_root()
            if not (content / SITE_FILE).is_file():
                raise BadInput(f"no {SITE_FILE} in {Path.cwd()} or any parent; run "
                               "`fleetgate init DIR` or pass --site DIR", source=str(Path.cwd()))
            found = content
        root = found
    return _site_at(root, (root / SITE_FILE).stat().st_mtime_ns)
