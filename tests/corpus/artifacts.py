"""Edited plan artifacts, given to `rollout start`. Each starts from the artifact `rollout plan`
wrote for the base plan and is edited the way someone with write access to the file would:
change what runs or where, then recompute the old-style `hash` (the first 16 hex digits of
sha256 over the sorted JSON without it) so that check alone cannot catch it. Edits that
change what runs also drop the closed window, so an accepted one would really run its
payload and leave a marker. Every entry starts with a copy of the state that planned the
artifact (whatever key it holds), so a refusal is the edit's, not a stranger's state."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from tests.corpus.base import Base, artifact_doc
from tests.corpus.entry import (
    Doc,
    Entry,
    Mutation,
    deep_json,
    drop,
    edits,
    mutated,
    not_regular,
    put,
    write,
)


def rehash(doc: Doc) -> Doc:
    body = {k: v for k, v in doc.items() if k != "hash"}
    doc["hash"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    return doc


def _open_up(doc: Doc) -> None:
    """What a tamperer adds so the payload runs now: no window, nothing measured first."""
    plan = doc["plan"]
    plan["window"] = None
    plan["canary"] = None
    plan["gates"]["baseline_hosts"] = 0
    plan["gates"]["checks"] = []


# (id, edit given the base and the entry id, the field it edits, runs?, the mistake)
Edit = Callable[[Base, str], Mutation]
EDITS: list[tuple[str, Edit, str, bool, str]] = [
    ("playbook-dotdot", lambda b, e: put("plan.change.playbook", f"../evil/{e}.yml"),
     "playbook", True, "the change playbook pointed out of the site with ../"),
    ("playbook-absolute", lambda b, e: put("plan.change.playbook", str(b.evil_playbook(e))),
     "playbook", True, "the change playbook replaced by an absolute path"),
    ("drain-playbook", lambda b, e: put("plan.drain", {
        "drain_playbook": str(b.evil_playbook(e)), "undrain_playbook": "playbooks/undrain.yml"}),
     "drain", True, "a drain playbook added, outside the site"),
    ("rollback-playbook", lambda b, e: put("plan.rollback.playbook", str(b.evil_playbook(e))),
     "rollback", True, "the rollback playbook (runs when the unreachable canary fails) "
     "replaced"),
    ("classes-outside", lambda b, e: put("plan.change.classes", "../outside-classes"),
     "classes", True, "the change's class directory pointed out of the site"),
    ("extra-vars-connection", lambda b, e: put("plan.change.extra_vars", {
        "ansible_connection": "local",
        "ansible_python_interpreter": str(b.evil_script(e))}), "extra_vars", True,
     "extra vars that run the change on the controller through a fake interpreter"),
    ("waves-empty", lambda b, e: put("waves", []), "waves", False, "no waves at all"),
    ("host-not-in-inventory", lambda b, e: put("waves", [["h1", "ghost"], ["h2", "h3"]]),
     "ghost", False, "a wave naming a host the inventory does not have"),
    ("host-in-no-wave", lambda b, e: put("waves", [["h1"], ["h2"]]), "h3", False,
     "a host left out of every wave"),
    ("host-in-two-waves", lambda b, e: put("waves", [["h1"], ["h1", "h2", "h3"]]), "h1", False,
     "a host in two waves"),
    ("waves-dict", lambda b, e: put("waves", {"1": ["h1"], "2": ["h2", "h3"]}), "waves", False,
     "waves as a mapping instead of a list"),
    ("hosts-list", lambda b, e: put("hosts", ["h1", "h2", "h3"]), "hosts", False,
     "hosts as a list instead of a mapping"),
    ("plan-string", lambda b, e: put("plan", "corpus-base"), "plan", False,
     "the plan replaced by a string"),
    ("plan-invalid", lambda b, e: put("plan.concurrency", 0), "concurrency", False,
     "a plan value its schema refuses (concurrency 0)"),
    ("plan-unknown-key", lambda b, e: put("plan.rollbak", {}), "rollbak", False,
     "an unknown key in the embedded plan"),
    ("limits-string", lambda b, e: put("limits.total", "lots"), "limits", False,
     "a budget limit that is not a number"),
    ("limits-raised", lambda b, e: edits(put("limits.total", 1000),
                                         put("limits.per_wave", [1000, 1000])), "", False,
     "the failure budget raised to 1000 after review"),
    ("missing-waves", lambda b, e: drop("waves"), "waves", False, "waves deleted"),
    ("missing-plan", lambda b, e: drop("plan"), "plan", False, "the plan deleted"),
    ("missing-inventory", lambda b, e: drop("inventory"), "inventory", False,
     "the inventory deleted"),
    ("missing-schema", lambda b, e: drop("schema"), "schema", False, "the schema deleted"),
    ("schema-v2", lambda b, e: put("schema", "fleetgate.rollout.plan/v2"), "schema", False,
     "a schema version this fleetgate does not know"),
    ("planned-at-only", lambda b, e: put("planned_at", "2020-01-01T00:00:00+00:00"), "", False,
     "only the planning time changed, hash recomputed"),
    ("hosts-class-changed", lambda b, e: put("hosts.h1.class", "nvidia-h100-535"), "", False,
     "a host's class changed in the artifact"),
]


def entries(base: Base) -> list[Entry]:
    doc = artifact_doc(base)
    out: list[Entry] = []

    def add(eid: str, path_text: str | bytes | None, expect_field: str, why: str,
            made: Path | None = None) -> None:
        full = f"artifact-{eid}"
        path = made if made is not None else write(base.dir("artifact", eid) / "artifact.json",
                                                   path_text or "")
        out.append(Entry(full, "artifact", ("rollout", "start", str(path)),
                         tuple(x for x in (f"{eid}/artifact.json", expect_field) if x), why,
                         cwd=base.site, state_from=base.state,
                         inputs=(path,) if made is None else ()))

    for eid, edit, _field, runs, why in EDITS:
        full = f"artifact-{eid}"
        mutation = edits(edit(base, full), _open_up) if runs else edit(base, full)
        edited = rehash(mutated(doc, mutation))
        # Refused as a whole (a MAC or signature that no longer matches) or for the field
        # edited: either way the file is what must be named.
        add(eid, json.dumps(edited, indent=2, sort_keys=True), "", why)
    # The inventory swapped for one with the same hosts, groups and domains (so the hosts
    # fingerprint still matches) that runs everything on the controller.
    full = "artifact-inventory-swapped"
    evil = base.evil_script(full)
    inv = write(base.dir("artifact", "inventory-swapped") / "hosts.ini",
                base.inventory.read_text().replace(
                    "ansible_port=1", f"ansible_port=1 ansible_connection=local "
                                      f"ansible_python_interpreter={evil}"))
    swapped = rehash(mutated(doc, edits(put("inventory", str(inv)), _open_up)))
    add("inventory-swapped", json.dumps(swapped, indent=2), "",
        "the inventory swapped for one that runs on the controller")
    text = json.dumps(doc, indent=2, sort_keys=True)
    stale = mutated(doc, put("plan.concurrency", 50))  # edited, hash left as it was
    # Duplicate keys: json.loads keeps the last, which the recomputed hash covers.
    dup = rehash(mutated(doc, put("limits.total", 1000)))
    dup_text = json.dumps(dup, indent=2, sort_keys=True).replace(
        '"limits": {', f'"limits": {json.dumps(doc["limits"])},\n  "limits": {{', 1)
    raw: list[tuple[str, str | bytes, str, str]] = [
        ("stale-hash", json.dumps(stale, indent=2), "", "edited without recomputing the hash"),
        ("missing-hash", json.dumps(mutated(doc, drop("hash"))), "", "the hash deleted"),
        ("duplicate-key", dup_text, "limits", "a second limits key that json.loads keeps"),
        ("not-json", text[: len(text) // 2], "", "cut off half way"),
        ("empty-file", "", "", "an empty artifact"),
        ("top-level-list", json.dumps([doc]), "", "a list holding the artifact"),
        ("bom", "\ufeff" + text, "", "a UTF-8 byte-order mark before the JSON"),
        ("invalid-utf8", text.replace('"notes": []', '"notes": ["\udcff"]', 1)
         .encode("utf-8", "surrogateescape"), "", "a byte that is not UTF-8"),
        ("too-deep", deep_json(), "", "arrays nested past the recursion limit"),
        ("number-out-of-range", text.replace('"concurrency": ', '"concurrency": 1e999, "c": ', 1),
         "", "1e999: valid JSON that reads as infinity"),
    ]
    for eid, content, field, why in raw:
        add(eid, content, field, why)
    for eid, path, reason, why in not_regular(
            lambda e: base.dir("artifact", e) / "artifact.json", "an artifact", "the artifact"):
        add(eid, None, reason, why, made=path)
    # A valid artifact with an inventory override: its hosts were fixed when it was planned.
    out.append(Entry("artifact-with-inventory-flag", "artifact",
                     ("rollout", "start", str(base.artifact), "-i", str(base.inventory)),
                     ("--inventory",), "an -i given with an artifact", cwd=base.site,
                     state_from=base.state, inputs=(base.artifact,)))
    return out
