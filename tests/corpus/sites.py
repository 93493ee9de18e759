"""Bad sites: each entry gets its own copy of the `fleetgate init` site with one thing wrong in
fleetgate.yml, in its tree (symlinks leading out), in the state it points at (a file, a
corrupt journal), or in the way the site is named (--site, FLEETGATE_SITE), and runs the
command that reads that part from inside the site."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import yaml

from tests.corpus.base import BASE_ROLLOUT_ID, Base
from tests.corpus.entry import (
    Doc,
    Entry,
    Mutation,
    deep_yaml,
    directory,
    drop,
    fifo,
    mutated,
    put,
    symlink,
    write,
    write_yaml,
)

SITE = "fleetgate.yml"
# State from fleetgate.yml, not the harness's fresh FLEETGATE_STATE_DIR (empty: no override).
SITE_STATE = {"FLEETGATE_STATE_DIR": ""}

# (id, mutation of fleetgate.yml, command, field that must be named, the mistake)
MUTATIONS: list[tuple[str, Mutation, tuple[str, ...], str, str]] = [
    ("version-2", put("fleetgate", 2), ("site",), "fleetgate", "format version 2"),
    ("version-missing", drop("fleetgate"), ("spec", "validate"), "fleetgate",
     "no format version"),
    ("unknown-key", put("clases", "classes"), ("site",), "clases", "a typo'd key"),
    ("classes-dotdot", put("classes", "../../outside-classes"), ("spec", "validate"),
     "classes", "classes outside the site through ../"),
    ("playbooks-string", put("playbooks", "playbooks"), ("rollout", "plan", "plans/base.yml"),
     "playbooks", "playbooks as a string instead of a list"),
    ("inventory-dotdot", put("inventory", ["../hosts.ini"]), ("fleet", "ping"), "inventory",
     "a default inventory outside the site"),
    ("state-nul", put("state", "state\x00dir"), ("rollout", "list"), "state",
     "a NUL byte in the state path"),
    ("state-too-long", put("state", "s" * 5000), ("rollout", "list"), "state",
     "a state path longer than any file system allows"),
]


def _site(base: Base, eid: str) -> Path:
    d = base.dir("site", eid) / "site"
    shutil.copytree(base.pristine, d, symlinks=True)
    return d


def _journal_db(path: Path, sql: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript(sql)
    db.close()
    return path


def entries(base: Base) -> list[Entry]:
    site_doc: Doc = yaml.safe_load((base.pristine / SITE).read_text())
    site_text = (base.pristine / SITE).read_text()
    out: list[Entry] = []

    def add(eid: str, argv: tuple[str, ...], expect: tuple[str, ...], why: str, *,
            cwd: Path, env: dict[str, str] | None = None, inputs: tuple[Path, ...] = (),
            absent: tuple[Path, ...] = ()) -> None:
        out.append(Entry(f"site-{eid}", "site", argv, tuple(x for x in expect if x), why,
                         cwd=cwd, env=env or {}, inputs=inputs, absent=absent))

    for eid, mutation, argv, field, why in MUTATIONS:
        d = _site(base, eid)
        path = write_yaml(d / SITE, mutated(site_doc, mutation))
        add(eid, argv, (f"{eid}/site/{SITE}", field), why, cwd=d, env=SITE_STATE,
            inputs=(path,))
    raw: list[tuple[str, str | bytes, str]] = [
        ("empty-file", "", "an empty fleetgate.yml"),
        ("yaml-syntax", site_text + "playbooks: [playbooks\n", "an unclosed flow"),
        ("duplicate-key", site_text + "classes: /etc\n", "a second classes key"),
        ("invalid-utf8", site_text.replace("# fleetgate", "# fleetg\udce4te", 1)
         .encode("utf-8", "surrogateescape"), "a byte that is not UTF-8"),
        ("too-deep", "fleetgate: 1\nclasses: " + deep_yaml(), "nested past the recursion limit"),
    ]
    for eid, content, why in raw:
        d = _site(base, eid)
        path = write(d / SITE, content)
        add(eid, ("site",), (f"{eid}/site/{SITE}",), why, cwd=d, inputs=(path,))

    # -- fleetgate.yml that is not a regular file
    for eid, make in (("is-directory", directory), ("fifo", fifo)):
        d = _site(base, eid)
        (d / SITE).unlink()
        make(d / SITE)
        add(eid, ("--site", str(d), "site"), (f"{eid}/site",), f"fleetgate.yml is a {eid}",
            cwd=base.root)
    d = _site(base, "is-directory-walk-up")
    (d / SITE).unlink()
    directory(d / SITE)
    add("is-directory-walk-up", ("site",), (f"is-directory-walk-up/site/{SITE}",),
        "fleetgate.yml is a directory, found by walking up (not another site instead)",
        cwd=d / "classes")

    # -- symlinks leading out of the site
    d = _site(base, "classes-symlink-out")
    shutil.rmtree(d / "classes")
    symlink(d / "classes", base.root / "outside-classes")
    add("classes-symlink-out", ("spec", "validate"), ("classes-symlink-out/site", "classes"),
        "the classes directory a symlink out of the site", cwd=d)
    d = _site(base, "class-file-symlink-out")
    (d / "classes" / "lab-cpu.yml").unlink()
    symlink(d / "classes" / "lab-cpu.yml", base.root / "outside-classes" / "lab-cpu.yml")
    add("class-file-symlink-out", ("spec", "validate"),
        ("class-file-symlink-out/site/classes/lab-cpu.yml",),
        "a class file that is a symlink out of the site", cwd=d)
    d = _site(base, "playbook-symlink-out")
    (d / "playbooks" / "noop.yml").unlink()
    symlink(d / "playbooks" / "noop.yml", base.evil_playbook("site-playbook-symlink-out"))
    add("playbook-symlink-out", ("rollout", "plan", "plans/base.yml"),
        ("base.yml", "playbook"), "the plan's playbook a symlink out of the site", cwd=d)
    d = _site(base, "inventory-symlink-out")
    outside = write(base.dir("site", "inventory-symlink-out") / "outside.ini",
                    base.inventory.read_text())
    (d / "inventory" / "hosts.ini").unlink()
    symlink(d / "inventory" / "hosts.ini", outside)
    add("inventory-symlink-out", ("fleet", "ping"), ("inventory-symlink-out/site", "inventory"),
        "the default inventory a symlink out of the site", cwd=d)

    # -- the site named from outside
    missing = base.dir("site", "env-site-missing") / "nope"
    add("env-site-missing", ("site",), ("FLEETGATE_SITE",), "FLEETGATE_SITE names nothing",
        cwd=base.root, env={"FLEETGATE_SITE": str(missing)})
    f = write(base.dir("site", "env-site-file") / "site.txt", "not a site\n")
    add("env-site-file", ("spec", "validate"), ("FLEETGATE_SITE",),
        "FLEETGATE_SITE names a regular file", cwd=base.root, env={"FLEETGATE_SITE": str(f)})
    add("flag-site-missing", ("--site", str(missing), "rollout", "list"), ("--site",),
        "--site names nothing", cwd=base.root)

    # -- state that is not a state directory
    f = write(base.dir("site", "state-env-is-file") / "state-file", "not a directory\n")
    add("state-env-is-file", ("rollout", "list"), ("state-file",),
        "FLEETGATE_STATE_DIR names a regular file", cwd=base.site,
        env={"FLEETGATE_STATE_DIR": str(f)}, inputs=(f,))
    d = _site(base, "state-yml-is-file")
    f = write(d / "state-file", "not a directory\n")
    write_yaml(d / SITE, mutated(site_doc, put("state", "state-file")))
    add("state-yml-is-file", ("rollout", "status", BASE_ROLLOUT_ID), ("state-file",),
        "fleetgate.yml's state names a regular file", cwd=d, env=SITE_STATE, inputs=(f,))
    journals: list[tuple[str, Any, tuple[str, ...], str]] = [
        ("journal-garbage", lambda p: write(p, b"\x00garbage, not SQLite\xff" * 100),
         ("rollout", "list"), "a journal.db that is not SQLite"),
        ("journal-truncated", lambda p: write(p, (base.state / "rollouts" / "journal.db")
                                              .read_bytes()[:3000]),
         ("rollout", "history", BASE_ROLLOUT_ID), "a journal.db cut short"),
        ("journal-foreign", lambda p: _journal_db(p, "CREATE TABLE rollouts (x TEXT);"
                                                  "INSERT INTO rollouts VALUES ('x');"),
         ("rollout", "list"), "an SQLite file of another program's schema"),
        ("journal-directory", lambda p: directory(p), ("rollout", "status", BASE_ROLLOUT_ID),
         "journal.db is a directory"),
    ]
    for eid, make, argv, why in journals:
        state = base.dir("site", eid) / "state"
        journal = make(state / "rollouts" / "journal.db")
        add(eid, argv, ("journal.db",), why, cwd=base.site,
            env={"FLEETGATE_STATE_DIR": str(state)},
            inputs=(journal,) if journal.is_file() else ())

    # -- init into the wrong place
    d = _site(base, "init-existing")
    add("init-existing", ("init", str(d)), (f"init-existing/site/{SITE}",),
        "init over an existing site", cwd=base.root, inputs=(d / SITE,))
    for eid, cls, why in (("init-class-dotdot", "../lab-cpu", "a class name with ../"),):
        target = base.dir("site", eid) / "new-site"
        add(eid, ("init", str(target), "--class", cls), ("--class",), why, cwd=base.root,
            absent=(target,))
    f = write(base.dir("site", "init-into-file") / "taken", "a file\n")
    add("init-into-file", ("init", str(f)), ("init-into-file/taken",),
        "init into a regular file", cwd=base.root, inputs=(f,))
    return out
