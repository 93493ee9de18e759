"""Sites: fleetgate.yml found from the working directory up (or --site / FLEETGATE_SITE), its
paths kept inside the site, `fleetgate init`, and plans naming playbooks of the site or of
fleetgate itself. Every malformed site file is one line naming the file, field and reason,
with nothing run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleetgate.errors import BadInput
from fleetgate.rollout.plan import classes_path, playbook_path
from fleetgate.site import SITE_FILE, content_root, current_site, find_site_root, load_site
from fleetgate.spec.loader import class_files, load_all, resolve_class
from tests.conftest import REPO, fleetgate


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    proc = fleetgate("init", str(tmp_path / "site"), "--class", "lab-cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    monkeypatch.chdir(tmp_path / "site")
    for var in ("FLEETGATE_SITE", "FLEETGATE_CLASSES_DIR", "FLEETGATE_STATE_DIR",
                "FLEETGATE_IMAGES_DIR", "FLEETGATE_LAB_DIR"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "site"


def test_init_scaffolds_a_site_that_validates(site: Path) -> None:
    for rel in (SITE_FILE, "README.md", ".gitignore", "inventory/hosts.ini",
                "classes/lab-cpu.yml"):
        assert (site / rel).is_file(), rel
    for rel in ("plans", "playbooks"):
        assert (site / rel).is_dir()
    assert ".fleetgate/" in (site / ".gitignore").read_text()
    proc = fleetgate("spec", "validate", cwd=site / "plans")  # found from below the site
    assert proc.returncode == 0, proc.stderr
    assert "1 class(es) valid" in proc.stdout


def test_a_command_finds_the_site_by_walking_up(site: Path) -> None:
    (site / "plans" / "deep").mkdir()
    os.chdir(site / "plans" / "deep")
    s = current_site()
    assert s.root == site.resolve()
    assert s.classes_dir == (site / "classes").resolve()
    assert s.state_dir == (site / ".fleetgate").resolve()
    assert s.inventory == [(site / "inventory" / "hosts.ini").resolve()]


def test_site_command_names_every_path_and_its_variable(site: Path) -> None:
    proc = fleetgate("site", "-o", "json", cwd=site,
                     env={"FLEETGATE_STATE_DIR": str(site.parent / "persistent")})
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["site"]["path"] == str(site.resolve())
    assert doc["state"] == {"path": str((site.parent / "persistent").resolve()),
                            "env": "FLEETGATE_STATE_DIR", "overridden": True}
    assert doc["classes"]["env"] == "FLEETGATE_CLASSES_DIR"
    assert doc["content"]["path"] == str(content_root())


def test_site_flag_and_variable_point_anywhere(site: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    flag = fleetgate("--site", str(site), "spec", "validate", cwd=elsewhere)
    env = fleetgate("spec", "validate", cwd=elsewhere, env={"FLEETGATE_SITE": str(site)})
    assert flag.returncode == env.returncode == 0, flag.stderr + env.stderr
    missing = fleetgate("--site", str(elsewhere), "spec", "validate", cwd=elsewhere)
    assert missing.returncode == 2 and "fleetgate init" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_outside_any_site_the_checkout_is_the_site(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLEETGATE_SITE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert current_site().root == REPO.resolve()
    assert current_site().classes_dir == (REPO / "inventory" / "classes").resolve()


def test_init_refuses_an_existing_site_and_unknown_classes(site: Path) -> None:
    before = (site / SITE_FILE).read_text()
    again = fleetgate("init", str(site))
    assert again.returncode == 2 and "already a site" in again.stderr
    assert (site / SITE_FILE).read_text() == before
    unknown = fleetgate("init", str(site.parent / "other"), "--class", "h200-nope")
    assert unknown.returncode == 2 and "has no class 'h200-nope'" in unknown.stderr
    assert not (site.parent / "other").exists()  # nothing written
    bad = fleetgate("init", str(site.parent / "other"), "--class", "../lab-cpu")
    assert bad.returncode == 2 and "not a class name" in bad.stderr


BAD_SITES = [
    ("missing version", "classes: classes\n", "fleetgate", "required field is missing"),
    ("version 2", "fleetgate: 2\n", "fleetgate", "1"),
    ("unknown key", "fleetgate: 1\nclases: classes\n", "clases", "unknown key"),
    ("classes outside", "fleetgate: 1\nclasses: ../other\n", "classes", "inside the site"),
    ("classes absolute", "fleetgate: 1\nclasses: /etc\n", "classes", "inside the site"),
    ("plans outside", "fleetgate: 1\nplans: a/../../b\n", "plans", "inside the site"),
    ("playbooks outside", "fleetgate: 1\nplaybooks: [/usr/share]\n", "playbooks[0]",
     "inside the site"),
    ("inventory outside", "fleetgate: 1\ninventory: [../../hosts.ini]\n", "inventory[0]",
     "inside the site"),
    ("playbooks not a list", "fleetgate: 1\nplaybooks: {a: 1}\n", "playbooks", "list"),
    ("state with newline", 'fleetgate: 1\nstate: "a\\nb"\n', "state", "must be a path"),
    ("state name too long", f"fleetgate: 1\nstate: {'s' * 300}\n", "state",
     "a file name is at most 255 bytes"),
    ("state path too long", f"fleetgate: 1\nstate: {'/abc' * 1100}\n", "state",
     "a path is under 4096 bytes"),
    ("classes name too long", f"fleetgate: 1\nclasses: c/{'c' * 256}\n", "classes",
     "a file name is at most 255 bytes"),
    ("not a mapping", "- fleetgate: 1\n", None, "mapping"),
    ("empty file", "", None, "mapping"),
    ("yaml error", "fleetgate: [1\n", None, "YAML syntax error"),
]


@pytest.mark.parametrize(("text", "field", "reason"), [c[1:] for c in BAD_SITES],
                         ids=[c[0] for c in BAD_SITES])
def test_malformed_site_file_is_one_line_naming_file_field_and_reason(
        tmp_path: Path, text: str, field: str | None, reason: str) -> None:
    (tmp_path / SITE_FILE).write_text(text)
    with pytest.raises(BadInput) as err:
        load_site(tmp_path)
    line = err.value.one_line()
    assert "\n" not in line and line.startswith(str(tmp_path / SITE_FILE))
    assert reason in line, line
    if field:
        assert err.value.field == field, line
    proc = fleetgate("spec", "validate", cwd=tmp_path)  # and through the CLI: exit 2, one line
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_symlink_out_of_the_site_is_refused_where_it_is_used(site: Path,
                                                              tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (site / "classes").rename(site / "classes.real")
    (site / "classes").symlink_to(tmp_path / "outside")
    with pytest.raises(BadInput, match="leads outside the site"):
        _ = current_site().classes_dir


@pytest.mark.parametrize("kind", ["directory", "fifo", "dangling symlink"])
def test_a_site_file_that_is_no_file_stops_the_walk_up(site: Path, kind: str) -> None:
    inner = site / "plans" / "inner"
    inner.mkdir()
    bad = inner / SITE_FILE
    if kind == "directory":
        bad.mkdir()
    elif kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to(inner / "nothing.yml")
    # Not the outer site instead: the operator meant this one.
    with pytest.raises(BadInput) as err:
        find_site_root(inner)
    assert err.value.source == str(bad)
    proc = fleetgate("site", cwd=inner)
    assert proc.returncode == 2 and proc.stderr.startswith(f"fleetgate: {bad}: "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert find_site_root(site / "plans") == site


def test_a_class_file_symlinked_out_of_the_classes_directory_is_refused(
        site: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (site / "classes" / "lab-cpu.yml").rename(outside / "lab-cpu.yml")
    (site / "classes" / "lab-cpu.yml").symlink_to(outside / "lab-cpu.yml")
    link = site / "classes" / "lab-cpu.yml"
    with pytest.raises(BadInput, match="a symlink leading outside the classes directory") as err:
        load_all(class_files([site / "classes"]))
    assert err.value.source == str(link)
    with pytest.raises(BadInput, match="outside the classes directory"):
        resolve_class("lab-cpu")
    proc = fleetgate("spec", "validate", cwd=site)
    assert proc.returncode == 2 and proc.stderr.startswith(f"fleetgate: {link}: "), proc.stderr
    # A classes directory that is itself a symlink within the site still works.
    link.unlink()
    (outside / "lab-cpu.yml").rename(site / "classes" / "lab-cpu.yml")
    (site / "classes").rename(site / "real-classes")
    (site / "classes").symlink_to(site / "real-classes")
    assert list(load_all(class_files([current_site().classes_dir]))) == ["lab-cpu"]


def test_plan_playbooks_come_from_the_site_or_from_fleetgate(site: Path) -> None:
    (site / "playbooks" / "mine.yml").write_text("- hosts: all\n  tasks: []\n")
    assert playbook_path("playbooks/mine.yml", source="p", field="f") == (
        site / "playbooks" / "mine.yml").resolve()
    # Not in the site: fleetgate's own.
    assert playbook_path("playbooks/kernel-update.yml", source="p", field="f") == (
        content_root() / "playbooks" / "kernel-update.yml")
    for rel, why in (("../x.yml", "without '..'"), ("/etc/passwd", "without '..'"),
                     ("classes/lab-cpu.yml", "playbook directories"),
                     ("playbooks/absent.yml", "no such playbook")):
        with pytest.raises(BadInput, match=why):
            playbook_path(rel, source="p", field="f")
    (site / "playbooks" / "out.yml").symlink_to("/etc/hostname")
    with pytest.raises(BadInput, match="leads outside the playbook directories"):
        playbook_path("playbooks/out.yml", source="p", field="f")


def test_plan_class_directories_stay_inside_the_site(site: Path) -> None:
    assert classes_path("classes") == (site / "classes").resolve()
    for rel in ("../site", "/tmp", "plans/none"):
        with pytest.raises(BadInput):
            classes_path(rel)


def test_without_i_a_command_takes_the_sites_inventory_or_says_how(site: Path) -> None:
    (site / "inventory" / "hosts.ini").write_text("[class_lab_cpu]\nh1 ansible_host='a;b'\n")
    bad = fleetgate("fleet", "ping", cwd=site)  # the site's own file, validated as any -i
    assert bad.returncode == 2 and str((site / "inventory" / "hosts.ini").resolve()) in bad.stderr
    assert "hosts.h1.ansible_host" in bad.stderr
    (site / SITE_FILE).write_text("fleetgate: 1\nclasses: classes\n")
    none = fleetgate("fleet", "ping", cwd=site)
    assert none.returncode == 2 and "no inventory: give -i" in none.stderr
    assert len(none.stderr.strip().splitlines()) == 1


def test_a_controller_without_lab_tools_is_told_what_is_missing(tmp_path: Path) -> None:
    """A controller-only install (no podman, qemu, Packer, ssh-keygen on PATH) runs every
    controller command; the lab and image builds name the tool they need and stop."""
    import sys

    env = {"PATH": str(Path(sys.executable).parent), "FLEETGATE_LAB_DIR": str(tmp_path / "lab"),
           "FLEETGATE_STATE_DIR": str(tmp_path), "FLEETGATE_IMAGES_DIR": str(tmp_path / "img")}
    lab = fleetgate("lab", "up", "--containers", "1", env=env)
    image = fleetgate("image", "build", "lab-cpu", env=env)
    for proc, tool in ((lab, "not found on PATH"), (image, "packer not found on PATH")):
        assert proc.returncode in (2, 5), proc.stderr
        assert tool in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "lab" / "state.json").exists()  # no host was started
    assert fleetgate("spec", "validate", env=env).returncode == 0
