"""Bad flags and arguments: host patterns, rollout ids, numbers out of range or not numbers at
all (NaN, infinity), choices that do not exist, paths that cannot be written. Every other
input of the command is valid (the base site, inventory, artifact, and the rollout
`corpus-base` in a copy of the base state), so the flag alone is what must be refused."""

from __future__ import annotations

from tests.corpus.base import BASE_ROLLOUT_ID, Base
from tests.corpus.entry import Entry, directory

RID = BASE_ROLLOUT_ID


def entries(base: Base) -> list[Entry]:
    inv, art, good = str(base.inventory), str(base.artifact), str(base.samples)
    noop = str(base.site / "playbooks" / "noop.yml")
    out: list[Entry] = []

    def add(eid: str, argv: tuple[str, ...], expect: tuple[str, ...], why: str,
            env: dict[str, str] | None = None) -> None:
        # Every flag entry runs against a copy of the base state: the rollout exists.
        out.append(Entry(f"flag-{eid}", "flag", argv, expect, why, cwd=base.site,
                         env=env or {}, state_from=base.state))

    touch = base.touch
    # -- host patterns
    add("limit-semicolon", ("fleet", "ping", "-i", inv, "--limit",
                            f"h1;{touch('flag-limit-semicolon')}"), ("--limit",),
        "a shell command after the host pattern")
    add("limit-subshell", ("smoke", "run", "-i", inv, "--limit", "$(reboot)"), ("--limit",),
        "a command substitution as the pattern")
    add("limit-no-match", ("smoke", "run", "-i", inv, "--limit", "nomatch"), ("nomatch",),
        "a pattern no host matches")
    add("diagnose-no-limit", ("diagnose", "-i", inv), ("--limit",), "diagnose without a host")
    # -- rollout ids
    add("id-dotdot", ("rollout", "history", "../../etc/passwd"), ("../../etc/passwd",),
        "an id that is a path")
    add("id-semicolon", ("rollout", "abort", "corpus-base;reboot"), ("corpus-base;reboot",),
        "an id with a shell separator")
    add("id-unknown", ("rollout", "resume", "no-such-rollout"), ("no-such-rollout",),
        "an id the journal does not have")
    add("start-id-bad", ("rollout", "start", art, "--id", "Bad Id"), ("Bad Id",),
        "a chosen rollout id with a space")
    add("start-id-taken", ("rollout", "start", art, "--id", RID), (RID,),
        "a chosen rollout id that already exists")
    # -- numbers
    add("approve-wave-zero", ("rollout", "approve", RID, "--wave", "0", "--reason", "ok"),
        ("--wave",), "wave 0")
    add("approve-wave-too-high", ("rollout", "approve", RID, "--wave", "99", "--reason", "ok"),
        ("--wave",), "wave 99 of 2")
    add("tolerance-negative", ("judge", "--baseline", good, "--canary", good,
                               "--tolerance", "-1"), ("--tolerance",), "a negative tolerance")
    add("tolerance-nan", ("judge", "--baseline", good, "--canary", good, "--tolerance", "nan"),
        ("--tolerance",), "a NaN tolerance")
    add("alpha-too-big", ("judge", "--baseline", good, "--canary", good, "--alpha", "2"),
        ("--alpha|alpha",), "a significance level of 2")
    add("uncertainty-inf", ("judge", "--baseline", good, "--canary", good,
                            "--uncertainty-limit", "inf"),
        ("--uncertainty-limit|uncertainty_limit",), "an infinite uncertainty limit")
    add("lease-ttl-one", ("rollout", "start", art, "--lease-ttl", "1"), ("--lease-ttl",),
        "a one-second lease")
    add("heartbeat-nan", ("rollout", "start", art, "--heartbeat", "nan"), ("--heartbeat",),
        "a NaN heartbeat")
    add("forks-zero", ("smoke", "run", "-i", inv, "--forks", "0"), ("--forks",), "no forks")
    add("gpus-too-many", ("diagnose", "--from", str(base.triage), "--gpus", "999"),
        ("--gpus",), "999 GPUs")
    # -- choices
    add("log-format-xml", ("rollout", "start", art, "--log-format", "xml"), ("--log-format",),
        "a log format that does not exist")
    add("plan-output-path", ("rollout", "plan", str(base.plan_file), "-o", "plan.json"),
        ("-o",), "the artifact path given to -o (the output format)")
    add("smoke-only-unknown", ("smoke", "run", "-i", inv, "--only", "gemm,burn"), ("burn",),
        "a check that does not exist")
    add("smoke-class-dotdot", ("smoke", "run", "-i", inv, "--class", "../lab-cpu"),
        ("--class|CLASS",), "a class name with ../")
    add("diagnose-backend", ("diagnose", "--from", str(base.triage), "--backend", "tpu"),
        ("--backend",), "a backend that does not exist")
    add("history-kind-unknown", ("rollout", "history", RID, "--kind", "bogus"), ("--kind",),
        "an event kind that does not exist")
    add("metric-direction", ("judge", "--baseline", good, "--canary", good, "--metric",
                             "gemm.tflops:sideways"), ("--metric",), "a direction that is "
        "neither higher nor lower")
    add("preflight-backend", ("preflight", "deps", str(base.site), "--backend", "tpu"),
        ("--backend",), "a pool backend that does not exist")
    add("lab-fault-kind", ("lab", "fault", "h1", "explode"), ("explode",),
        "a fault kind that does not exist")
    add("cache-key-engine", ("fleet", "cache-key", "h1", "-i", inv, "--engine", "tensorrt"),
        ("--engine",), "an engine without a version")
    add("cache-key-host", ("fleet", "cache-key", "h1;reboot", "-i", inv, "--engine",
                           "torch=2.4.1"), ("h1;reboot",), "two host names in one")
    # -- extra vars and playbooks on the command line
    add("play-extra-subshell", ("fleet", "play", noop, "-i", inv, "-e", "note=$(reboot)"),
        ("--extra-vars",), "a command substitution in -e")
    add("play-extra-connection", ("fleet", "play", noop, "-i", inv, "-e",
                                  "ansible_connection=local"), ("ansible_connection",),
        "-e moving the play onto the controller")
    add("play-name-dotdot", ("fleet", "play", "../../../etc/passwd", "-i", inv),
        ("PLAYBOOK",), "a playbook name climbing out of playbooks/")
    # -- paths and URLs the command would write to or call
    add("metrics-file-not-prom", ("rollout", "start", art, "--metrics-file",
                                  str(base.root / "fleetgate.txt")), ("--metrics-file",),
        "a metrics file node_exporter would not read")
    add("webhook-file-url", ("rollout", "start", art, "--webhook", "file:///etc/passwd"),
        ("--webhook",), "a file:// webhook")
    add("webhook-env-ftp", ("rollout", "start", art), ("--webhook",),
        "FLEETGATE_ROLLOUT_WEBHOOK set to an ftp:// URL",
        env={"FLEETGATE_ROLLOUT_WEBHOOK": "ftp://example.com/hook"})
    d = directory(base.dir("flag", "report-html-dir") / "report.html")
    add("report-html-dir", ("rollout", "report", RID, "--html", str(d)),
        ("report-html-dir/report.html",), "an HTML report path that is a directory")
    add("preflight-target-missing", ("preflight", "deps", str(base.root / "no-such.whl"),
                                     "--backend", "cpu"), ("no-such.whl",),
        "a target that does not exist")
    add("image-show-ref", ("image", "show", "lab-cpu:latest"), ("lab-cpu:latest",),
        "an image version that is not a number")
    # -- the command line itself
    add("unknown-command", ("triage",), ("triage",), "a command that does not exist")
    add("unknown-option", ("spec", "validate", "--frobnicate"), ("--frobnicate",),
        "an option that does not exist")
    add("smoke-run-json-path", ("smoke", "run", "-i", inv, "--json", "out.json"),
        ("out.json",), "--json given a path, as in older versions")
    return out
