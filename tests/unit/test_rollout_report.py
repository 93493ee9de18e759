"""Rollout reports and telemetry: the HTML page and Markdown summary, `rollout explain`, the
Prometheus textfile and /metrics endpoint, and webhooks against a local HTTP server. Journals
come from tests/fixtures/rollout (written through the Journal API, and a real lab journal).
The page in a real browser is tests/integration/test_rollout_report_chromium.py."""

from __future__ import annotations

import base64
import dataclasses
import html
import json
import os
import re
import sqlite3
import stat
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer

from fleetgate.cli import rollout_cmd
from fleetgate.cli.output import Output
from fleetgate.errors import BadInput
from fleetgate.rollout import (
    engine,
    metrics,
    notify,
    report_data,
    report_html,
    report_md,
    status,
)
from fleetgate.rollout.journal import Journal
from tests.conftest import REPO, fleetgate
from tests.fixtures.rollout.journal_builder import (
    HOSTILE,
    RID,
    WAVES,
    build_journal,
    build_kernel_journal,
)

HOSTS = [h for w in WAVES for h in w]
LAB_SQL = REPO / "tests" / "fixtures" / "rollout" / "lab-drills.sql"
DEMO_SQL = REPO / "tests" / "fixtures" / "rollout" / "demo-rollouts.sql"
DEMO_KERNEL, DEMO_BLAS = "demo-kernel-20261202-042543", "demo-bad-blas-20261202-042543"


@pytest.fixture(scope="module")
def halted(tmp_path_factory: pytest.TempPathFactory) -> Journal:
    j, _ = build_journal(tmp_path_factory.mktemp("halted") / "journal.db")
    return j


@pytest.fixture(scope="module")
def halted_html(halted: Journal) -> str:
    return report_html.render(halted, RID)


@pytest.fixture
def fresh(tmp_path: Path) -> Journal:
    """A journal of its own for tests that write to it."""
    j, _ = build_journal(tmp_path / "journal.db")
    return j


def lab_journal(tmp_path: Path, sql: Path = LAB_SQL) -> Journal:
    db = tmp_path / f"{sql.stem}.db"
    con = sqlite3.connect(db)
    con.executescript(sql.read_text())
    con.close()
    return Journal(db)


# ------------------------------------------------------------------------------- HTML

SVG_RE = re.compile(r"<svg\b.*?</svg>", re.S)


def test_html_is_one_offline_page(halted_html: str) -> None:
    assert halted_html.startswith("<!DOCTYPE html>")
    # Nothing fetched from anywhere: no scripts, no external refs, and a CSP that forbids it.
    for needle in ('src="http', "src='http", 'href="http', "href='http", "@import", "url(http",
                   "<script", "<link", "<iframe", "<img"):
        assert needle not in halted_html.lower(), needle
    assert "http://" not in halted_html and "https://" not in halted_html
    assert "default-src 'none'" in halted_html


class TagBalance(HTMLParser):
    """Every element the page opens is closed, in order (void elements aside)."""

    VOID = frozenset({"meta", "br", "path", "use", "rect"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"</{tag}> at {self.getpos()}")


def test_html_tags_balance(halted_html: str) -> None:
    p = TagBalance()
    p.feed(halted_html)
    assert p.errors == [] and p.stack == []


def test_html_of_a_running_rollout_shows_steps_in_progress(fresh: Journal) -> None:
    fresh.set_rollout(RID, "running", wave=3, phase="applying")
    fresh.set_host(RID, "gpu-b01", "applying")
    page = report_html.render(fresh, RID)
    assert "still in progress" in SVG_RE.findall(page)[0]
    assert 'class="badge s-running"' in page


def test_html_plots_are_inline_svg_with_content(halted_html: str) -> None:
    svgs = SVG_RE.findall(halted_html)
    assert len(svgs) == 3  # the timeline and one per canary judgement (waves 1 and 2)
    for s in svgs:
        assert 'viewBox="' in s and s.count("<path") > 20, s[:200]
        assert "<?xml" not in s and "DOCTYPE" not in s
    timeline, wave1, wave2 = svgs
    for h in HOSTS:
        assert h in timeline
    assert "w2 gpu-a03 · failed_held" in timeline and "awaiting approval" in timeline
    # Distributions with the tolerance thresholds drawn and labelled.
    for s in (wave1, wave2):
        assert "tolerance -5%" in s and "tolerance +10%" in s
        assert "gemm.tflops" in s and "inference.p99_ms" in s
    assert "FAIL -12." in wave2 and "PASS" in wave1
    # Ids stay unique across the inline figures.
    ids = re.findall(r'\bid="([^"]+)"', halted_html)
    assert len(ids) == len(set(ids))


def test_html_lists_every_host_with_state_and_reason(halted: Journal, halted_html: str) -> None:
    hosts_section = halted_html.split("<section id=hosts>")[1].split("</section>")[0]
    for h, row in halted.hosts(RID).items():
        assert f"<code>{h}</code>" in hosts_section
        assert html.escape(row.reason) in hosts_section
    for state in ("healthy", "rolled_back", "failed_held", "skipped"):
        assert f'class="badge s-{state}"' in hosts_section


def test_html_escapes_journal_data(halted_html: str) -> None:
    assert "<script>" not in halted_html
    assert html.escape(HOSTILE) in halted_html


def test_html_has_verdicts_plan_and_versions(halted: Journal, halted_html: str) -> None:
    for e in halted.events(RID, kinds=("canary",)):
        assert html.escape(e["data"]["explanation"]) in halted_html
    assert "significantly worse: -12." in halted_html
    for text in ("examples/rollout/pin-package.yml", "nvidia-driver-575", "Europe/Berlin",
                 "on failure", "max_failed", "50%", "before wave(s) 2", "baseline hosts 2",
                 "mode baseline", "tolerates 50% of 2 = 1 failed"):
        assert html.escape(text) in halted_html, text
    versions = halted_html.split("<section id=versions>")[1].split("</section>")[0]
    # gpu-a02 was rolled back: read before on 570, last on 570 after the rollback, so only
    # the kernel it booted differs; the full readings are folded away.
    a02 = versions.split("<code>gpu-a02</code></td>")[1].split("</tr>")[0]
    assert '<span class="changed">kernel</span> <code>6.8.0-55-generic</code> → ' \
           "<code>6.8.0-57-generic</code>" in a02
    assert "570.133.20-1" not in a02.split("<details>")[0]
    assert "<details><summary>" in a02 and "rollback-verify" in a02
    # Hosts whose change reads alike share one row: a01 and a03 went 570 -> 575.
    a01 = versions.split("<td><code>gpu-a01</code>, <code>gpu-a03</code></td>")[1]
    assert '<span class="changed">manifest.class_version</span> <code>2</code> → ' \
           "<code>3</code>" in a01.split("</tr>")[0]
    assert versions.count("never read") == 1
    assert "<code>gpu-b01</code>, <code>gpu-b02</code>, <code>gpu-b03</code></td><td><span " \
           'class="muted">never read' in versions
    # The halt says where the fleet stands and what to run next.
    nxt = halted_html.split("<section id=next>")[1].split("</section>")[0]
    assert "3 untouched (skipped): gpu-b01, gpu-b02, gpu-b03" in nxt
    assert f"<code>fleetgate rollout explain {RID} --wave 2</code>" in nxt


def test_html_of_real_lab_journal(tmp_path: Path) -> None:
    j = lab_journal(tmp_path)
    for rid, state in (("drill-1", "halted"), ("drill-2", "completed")):
        page = report_html.render(j, rid)
        assert f"Rollout {rid} (stamp-drill): {state}" in page
        assert "The plan has no canary section" in page
        assert "No host reported a manifest" in page  # the lab hosts have none
        assert "file /var/lib/fleetgate-example/version" in page
        assert len(SVG_RE.findall(page)) == 1
        for h in ("lab-c01", "lab-c06"):
            assert f"<code>{h}</code>" in page
    assert "malformed probe output" in report_html.render(j, "drill-1")


def test_html_before_anything_ran(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    art = json.loads(json.dumps(report_data_artifact()))
    j.create_rollout("fresh-one", "driver-575", "/srv/inventory.yml", art, WAVES)
    page = report_html.render(j, "fresh-one")
    assert "No host started: nothing to draw." in page
    assert "No host state was recorded" in page and "unknown" in page
    assert "No canary verdict was reached" in page
    md = report_md.render(j, "fresh-one")
    assert md.startswith("**PLANNED**: `kernel ? → 6.8.0-57-generic; nvidia-driver-575 → "
                         "575.57.08-1; class_version 2 → 3` on class `h100-sxm`")
    assert "Reason" not in md


def report_data_artifact() -> dict[str, Any]:
    from tests.fixtures.rollout.journal_builder import artifact

    return artifact()


# ---------------------------------------------------------------------------- Markdown

def test_markdown_summary(halted: Journal, tmp_path: Path) -> None:
    text = report_md.render(halted, RID, html_path=tmp_path / "r.html")
    lines = text.splitlines()
    # One line states the change, class, outcome, hosts by state, duration, operator, git.
    assert lines[0] == (
        "**HALTED**: `kernel 6.8.0-55-generic → 6.8.0-57-generic; manifest.class_version 2 → 3; "
        "package nvidia-driver-570 570.133.20-1 → not installed` on class `h100-sxm`, 6 hosts "
        "(1 failed_held, 1 healthy, 1 rolled_back, 3 skipped), 19m58s, by `alice@ops-01` at "
        "git `0a1b2c3d4e5f`")
    html = tmp_path / "r.html"
    assert f"- HTML report: [r.html]({html.as_uri()}) `{html}`" in lines
    assert "- Reason: `wave 2 budget exceeded: 2 failed > 1 tolerated; rollout budget " \
           "exceeded: 2 failed > 1 tolerated`" in lines
    assert "- 3 untouched (skipped): `gpu-b01`, `gpu-b02`, `gpu-b03`: `rollout halted" in text
    assert "- 1 held out of service: `gpu-a03`: `canary analysis failed" in text
    assert f"- `fleetgate rollout explain {RID} --wave 2`" in lines
    # Plain Markdown: data sits in code spans, with no backslash escapes and no raw HTML.
    assert "\\" not in text and "|" not in text
    assert HOSTILE + "`" in text  # inside a code span, where nothing is markup
    for line in lines:
        assert line.count("`") % 2 == 0, line
    verdicts = [x for x in lines if x.startswith("- wave ")]
    assert verdicts[0].startswith("- wave 1 (`gpu-a01`): **PASS**")
    assert verdicts[1].startswith("- wave 2 (`gpu-a02`, `gpu-a03`): **FAIL**, failed "
                                  "`gemm.tflops`")


def test_markdown_completed_with_skipped_canary(tmp_path: Path) -> None:
    j, _ = build_journal(tmp_path / "j.db", regress=False)
    text = report_md.render(j, RID)
    assert text.startswith("**COMPLETED**") and "- 6 changed and verified: " in text
    assert "- wave 3 (`gpu-b01`, `gpu-b02`, `gpu-b03`): **SKIPPED**: `no baseline host left" \
           in text


def test_markdown_kernel_update_states_old_and_new_kernel(tmp_path: Path) -> None:
    j, rid = build_kernel_journal(tmp_path / "k.db")
    text = report_md.render(j, rid)
    assert text.startswith("**COMPLETED**: `kernel 6.1.0-55-cloud-amd64 → 6.1.0-57-cloud-amd64`"
                           " on class `lab-vm`, 2 hosts (2 healthy), 6m20s, by `bob@ops-02` "
                           "at git `feedc0ffee12`\n")
    assert "- `lab-v01`, `lab-v02`: `kernel 6.1.0-55-cloud-amd64 → 6.1.0-57-cloud-amd64`" in text


# ----------------------------------------------------------------------------- explain

def test_explain_wave(halted: Journal) -> None:
    text = report_data.explain_wave(halted, RID, 2)
    head, *body = text.splitlines()
    assert head.endswith("canaries gpu-a02, gpu-a03 judged against baseline gpu-b01, "
                         "gpu-b02: FAIL")
    assert body[0].startswith("gemm.tflops: FAIL") and "p=" in body[0]
    assert body[-1].startswith("gate (baseline): FAIL — critical metric failed: gemm.tflops")
    assert report_data.explain_wave(halted, RID, 3) == (
        "wave 3: no canary verdict (every host of the wave was skipped)")


def test_explain_rerenders_when_text_missing(fresh: Journal) -> None:
    ev = fresh.events(RID, kinds=("canary",))[0]
    data = {k: v for k, v in ev["data"].items() if k != "explanation"}
    (jd,) = report_data.judgements([{**ev, "data": data}])
    assert jd.explanation == ev["data"]["explanation"]


@pytest.mark.parametrize("wave", [0, 4])
def test_explain_bad_wave(halted: Journal, wave: int) -> None:
    with pytest.raises(BadInput, match=r"--wave: \d: the rollout has 3 wave\(s\)"):
        report_data.explain_wave(halted, RID, wave)


def test_explain_and_report_cli(tmp_path: Path) -> None:
    env = {"FLEETGATE_STATE_DIR": str(tmp_path)}
    build_journal(tmp_path / "rollouts" / "journal.db")
    p = fleetgate("rollout", "explain", RID, "--wave", "1", env=env)
    assert p.returncode == 0, p.stderr
    assert ": PASS\ngemm.tflops: PASS" in p.stdout
    p = fleetgate("rollout", "explain", RID, "--wave", "9", env=env)
    assert p.returncode == 2
    assert p.stderr == "fleetgate: --wave: 9: the rollout has 3 wave(s)\n"
    out, md = tmp_path / "r.html", tmp_path / "r.md"
    p = fleetgate("rollout", "report", RID, "--html", str(out), "--md", str(md), env=env)
    assert p.returncode == 0, p.stderr
    assert SVG_RE.search(out.read_text()) and md.read_text().startswith("**HALTED**: ")
    assert f"- HTML report: [r.html]({out.as_uri()}) `{out}`" in md.read_text()


def test_report_cli_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(tmp_path))
    build_journal(tmp_path / "rollouts" / "journal.db")
    cases: list[tuple[Callable[[], None], str]] = [
        (lambda: rollout_cmd.explain("no-such-rollout", 1), "no-such-rollout: no such rollout"),
        (lambda: rollout_cmd.explain("Bad Id", 1), "a rollout id is lower-case"),
        (lambda: rollout_cmd.report(RID), "rollout report: give --html OUT, --md OUT or both"),
        (lambda: rollout_cmd.report(RID, tmp_path / "nope" / "r.html"), "no such directory"),
        (lambda: rollout_cmd.report("no-such-rollout", tmp_path / "r.html"), "no such rollout"),
    ]
    for call, err in cases:
        with pytest.raises(BadInput) as exc:
            call()
        assert err in exc.value.one_line()
    assert not (tmp_path / "r.html").exists()


# ----------------------------------------------------------------------------- metrics

def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    parser = pytest.importorskip("prometheus_client.parser")
    return {(s.name, frozenset(s.labels.items())): s.value
            for fam in parser.text_string_to_metric_families(text) for s in fam.samples}


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str,
          **labels: str) -> float:
    return samples[(metric, frozenset({"rollout": "driver-575", **labels}.items()))]


def test_metrics_text_parses_and_matches_journal(halted: Journal) -> None:
    text = metrics.render(halted, [RID])
    s = parse(text)
    # The plan name is the bounded `rollout` label; the id only on the info metric.
    assert value(s, "fleetgate_rollout_info", id=RID, **{"class": "h100-sxm"},
                 change="pin-package kernel=6.8.0-57-generic,nvidia-driver-575=575.57.08-1,"
                 "class_version=3") == 1
    assert RID not in text.replace(f'id="{RID}"', "")
    assert value(s, "fleetgate_rollout_waves_total") == 3
    row0 = halted.rollout(RID)
    assert row0 is not None
    assert value(s, "fleetgate_rollout_start_timestamp_seconds") == row0.created_at
    assert value(s, "fleetgate_rollout_duration_seconds") == pytest.approx(1198, abs=1)
    assert value(s, "fleetgate_rollout_canary_score") == 50.0
    assert s[("fleetgate_rollout_canary_relative_shift",
              frozenset({"rollout": "driver-575", "metric": "gemm.tflops"}.items()))] < -0.1
    assert value(s, "fleetgate_rollout_state", state="halted") == 1
    assert sum(v for (n, _), v in s.items() if n == "fleetgate_rollout_state") == 1
    assert value(s, "fleetgate_rollout_wave") == 2
    for state, n in {"healthy": 1, "rolled_back": 1, "failed_held": 1, "skipped": 3,
                     "pending": 0}.items():
        assert value(s, "fleetgate_rollout_hosts", state=state) == n
    # verify on a01, a02, a03; soak on a01; rollback-verify on a02. Baseline and canary
    # measurements are not gates.
    assert value(s, "fleetgate_rollout_gate_verdicts_total", check="gemm", verdict="pass") == 5
    assert value(s, "fleetgate_rollout_gate_verdicts_total", check="discovery",
                 verdict="pass") == 3
    assert value(s, "fleetgate_rollout_gate_verdicts_total", check="gemm", verdict="fail") == 0
    assert value(s, "fleetgate_rollout_canary_verdicts_total", verdict="pass") == 1
    assert value(s, "fleetgate_rollout_canary_verdicts_total", verdict="fail") == 2
    assert value(s, "fleetgate_rollout_halts_total") == 1
    assert value(s, "fleetgate_rollout_budget_failed") == 2
    assert value(s, "fleetgate_rollout_budget_tolerated") == 1
    row = halted.rollout(RID)
    assert row is not None
    assert value(s, "fleetgate_rollout_last_update_timestamp_seconds") >= row.updated_at
    for fam in ("fleetgate_rollout_hosts gauge", "fleetgate_rollout_halts_total counter"):
        assert f"# TYPE {fam}\n" in text
    assert text.count("# HELP ") == text.count("# TYPE ") == 15


def test_metrics_label_escaping() -> None:
    assert metrics.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    fam = metrics.Family("x_info", "gauge", "test")
    fam.add(1, rollout=RID, name='we"ird\\na\nme')
    s = parse("\n".join(fam.text()) + "\n")
    assert s[("x_info", frozenset({"rollout": RID, "name": 'we"ird\\na\nme'}.items()))] == 1


def test_metrics_two_runs_of_a_plan_do_not_double_the_series(tmp_path: Path) -> None:
    j = lab_journal(tmp_path)  # drill-1 (halted) and drill-2 (completed): one plan
    one = parse(metrics.render(j, ["drill-1"]))
    both = parse(metrics.render(j, ["drill-1", "drill-2"]))
    assert len(both) == len(one)
    assert metrics.exported(j.rollouts()) == ["drill-2"]  # the last finished one per plan
    assert both[("fleetgate_rollout_state", frozenset({"rollout": "stamp-drill",
                                                      "state": "completed"}.items()))] == 1
    info = [lab for (n, lab) in both if n == "fleetgate_rollout_info"]
    assert [dict(x)["id"] for x in info] == ["drill-2"]
    # An active run of the plan wins over the finished ones.
    art = j.rollout("drill-1")
    assert art is not None
    j.create_rollout("drill-3", "stamp-drill", art.inventory, art.artifact,
                     art.artifact["waves"])
    assert metrics.exported(j.rollouts()) == ["drill-3"]
    assert len(parse(metrics.render(j, [r.id for r in j.rollouts()]))) == len(one)


def test_metrics_file_follows_the_rollout(fresh: Journal, tmp_path: Path) -> None:
    out = tmp_path / "prom" / "fleetgate.prom"
    out.parent.mkdir()
    m = metrics.attach(fresh, RID, out)
    assert value(parse(out.read_text()), "fleetgate_rollout_state", state="halted") == 1
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    fresh.set_host(RID, "gpu-b01", "applying")
    assert value(parse(out.read_text()), "fleetgate_rollout_hosts", state="applying") == 1
    fresh.set_rollout(RID, "running", wave=3, phase="applying")
    s = parse(out.read_text())
    assert value(s, "fleetgate_rollout_state", state="running") == 1
    assert value(s, "fleetgate_rollout_wave") == 3
    # Events that change no metric do not rewrite the file; other rollouts are ignored.
    before = out.stat().st_mtime_ns, out.read_text()
    calls: list[int] = []
    m.write = lambda: calls.append(1)  # type: ignore[method-assign]
    fresh.event(RID, "ansible", {"event": "runner_on_ok"})
    m({"rollout_id": "other", "kind": "host"})
    assert not calls and (out.stat().st_mtime_ns, out.read_text()) == before
    assert os.listdir(out.parent) == ["fleetgate.prom"]  # no temp file left behind


@pytest.mark.parametrize(("name", "err"), [
    ("m.txt", "reads only *.prom files"), ("nodir/m.prom", "no such directory")])
def test_metrics_file_bad_path(tmp_path: Path, name: str, err: str) -> None:
    with pytest.raises(BadInput, match=re.escape(err)):
        metrics.check_path(tmp_path / name)


def test_serve_metrics(halted: Journal) -> None:
    server = metrics.make_server(halted, [], "127.0.0.1", 0)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:  # noqa: S310
            assert resp.headers["Content-Type"] == metrics.CONTENT_TYPE
            s = parse(resp.read().decode())
        assert value(s, "fleetgate_rollout_budget_failed") == 2
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(f"{base}/", timeout=5)  # noqa: S310
        assert exc.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(BadInput, match="no such rollout"):
        metrics.make_server(halted, ["nope-nope"], "127.0.0.1", 0)
    with pytest.raises(BadInput, match="--bind"):
        metrics.make_server(halted, [], "localhost; rm", 0)


# ---------------------------------------------------------------------------- webhooks

class Hook:
    """A local webhook endpoint that records every request; `respond` picks the status."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.respond: Callable[[int], int] = lambda _n: 200
        self.got = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.requests.append({"path": self.path, "headers": dict(self.headers),
                                      "json": json.loads(body)})
                code = hook.respond(len(hook.requests))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()
                hook.got.set()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T0/secret-path?token=abc"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hook]:
    monkeypatch.setenv("no_proxy", "*")  # a CI proxy must not intercept 127.0.0.1
    h = Hook()
    yield h
    h.close()


def notifier(j: Journal, url: str, logs: list[str] | None = None) -> notify.Notifier:
    n = notify.Notifier(j, RID, url, timeout_s=3, backoff_s=0.01,
                        log=(logs.append if logs is not None else None))
    j.listeners.append(n)
    return n


def test_webhook_triggers_and_payload(fresh: Journal, hook: Hook) -> None:
    n = notifier(fresh, hook.url)
    fresh.set_rollout(RID, "running", wave=3, phase="awaiting approval")  # not a trigger
    fresh.event(RID, "approval_needed", {"wave": 3}, wave=3)
    # Sends run on a background thread and build their payload at send time: let the first
    # one go before the journal moves on, so its snapshot is the awaiting-approval one.
    deadline = time.monotonic() + 20
    while not hook.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    fresh.set_host(RID, "gpu-b01", "rolled_back", "canary failed; rolled back")
    fresh.set_rollout(RID, "completed")
    n.close()
    got = [r["json"] for r in hook.requests]
    assert [g["trigger"] for g in got] == ["approval_needed", "rollback", "completed"]
    assert all(r["path"] == "/hooks/T0/secret-path?token=abc" for r in hook.requests)
    assert all(r["headers"]["Content-Type"] == "application/json" for r in hook.requests)
    first = got[0]
    assert first["schema"] == notify.SCHEMA and first["rollout"] == RID
    assert first["event"]["kind"] == "approval_needed" and first["event"]["wave"] == 3
    assert first["status"]["phase"] == "awaiting approval"
    assert "needs approval for wave 3" in first["text"]
    assert got[1]["event"]["host"] == "gpu-b01" and got[1]["event"]["data"]["to"] == "rolled_back"
    assert got[2]["status"]["state"] == "completed"


def test_webhook_on_halt_says_where_the_fleet_is_and_what_next(tmp_path: Path,
                                                                hook: Hook) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "driver-575", "/srv/inventory.yml", report_data_artifact(), WAVES)
    n = notifier(j, hook.url)
    j.set_host(RID, "gpu-a01", "failed_held", "not at target after verify: kernel x != y")
    for h in HOSTS[1:]:
        j.set_host(RID, h, "skipped", "rollout halted before this host started")
    j.set_rollout(RID, "halted", reason="rollout budget exceeded")
    n.close()
    halt = next(r["json"] for r in hook.requests if r["json"]["trigger"] == "halt")
    assert halt["fleet"] == [
        "1 held out of service: gpu-a01 (not at target after verify: kernel x != y)",
        "5 untouched (skipped): gpu-a02, gpu-a03, gpu-b01, gpu-b02, gpu-b03 (rollout halted "
        "before this host started)"]
    assert halt["next_steps"][:3] == [
        f"fleetgate rollout explain {RID} --wave 1",
        f"fleetgate rollout history {RID} --kind host",
        "fleetgate diagnose -i /srv/inventory.yml --limit gpu-a01"]
    assert "fleetgate rollout plan /srv/plans/driver-575.yml" in halt["next_steps"]
    assert "1 held out of service: gpu-a01" in halt["text"]
    assert f"next: fleetgate rollout explain {RID} --wave 1" in halt["text"]


def test_webhook_payload_is_built_at_send_time(fresh: Journal, hook: Hook) -> None:
    fresh.set_rollout(RID, "running", wave=3, phase="applying")

    def respond(n: int) -> int:
        if n == 1:
            # Between the first (failed) attempt and its retry, the rollout halts.
            fresh.set_rollout(RID, "halted", reason="rollout budget exceeded")
            return 503
        return 200

    hook.respond = respond
    n = notifier(fresh, hook.url)
    fresh.set_host(RID, "gpu-b01", "rolled_back", "canary failed; rolled back")
    n.close()
    got = [r["json"] for r in hook.requests]
    assert [g["trigger"] for g in got] == ["rollback", "rollback", "halt"]
    assert got[0]["status"]["state"] == "running"
    assert got[1]["status"]["state"] == "halted"  # the retry carries the state of its time
    assert got[1]["status"]["reason"] == "rollout budget exceeded"
    assert got[1]["event"] == got[0]["event"]  # about the same event
    assert not fresh.events(RID, kinds=("notify_error",))


def test_webhook_failure_is_recorded_redacted_and_harmless(fresh: Journal, hook: Hook) -> None:
    hook.respond = lambda _n: 500
    url = hook.url.replace("http://", "http://ops:hunter2@")
    logs: list[str] = []
    n = notifier(fresh, url, logs)
    fresh.set_rollout(RID, "halted", reason="budget")  # the rollout goes on regardless
    n.close()
    assert len(hook.requests) == 4  # 1 + 3 retries
    auth = hook.requests[0]["headers"]["Authorization"]
    assert base64.b64decode(auth.removeprefix("Basic ")) == b"ops:hunter2"
    (err,) = fresh.events(RID, kinds=("notify_error",))
    assert err["data"]["trigger"] == "halt" and err["data"]["attempts"] == 4
    assert err["data"]["error"].startswith("HTTP 500")
    assert err["data"]["url"] == f"http://…@127.0.0.1:{hook.server.server_port}/…"
    for secret in ("hunter2", "ops", "secret-path", "token", "abc"):
        assert secret not in json.dumps(err["data"]), secret
        assert all(secret not in line for line in logs), (secret, logs)


def test_webhook_client_error_is_not_retried(fresh: Journal, hook: Hook) -> None:
    hook.respond = lambda _n: 404
    n = notifier(fresh, hook.url)
    fresh.set_rollout(RID, "aborted", reason="operator")
    n.close()
    assert len(hook.requests) == 1
    (err,) = fresh.events(RID, kinds=("notify_error",))
    assert err["data"]["attempts"] == 1 and err["data"]["trigger"] == "aborted"


def test_webhook_unreachable(fresh: Journal, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("no_proxy", "*")
    h = Hook()
    url = h.url
    h.close()  # nothing listens there any more
    n = notifier(fresh, url)
    assert n.deliver("halt", {"seq": 1, "kind": "rollout", "data": {}}) is False
    n.close()
    (err,) = fresh.events(RID, kinds=("notify_error",))
    assert err["data"]["attempts"] == 4 and "secret" not in err["data"]["error"]


@pytest.mark.parametrize("url", [
    "ftp://ops:hunter2@example.com/x", "file:///etc/passwd", "https:///no-host",
    "http://ops:hunter2@exa mple.com/", "http://example.com:port/", "hooks.example.com/x"])
def test_webhook_url_validation(url: str) -> None:
    with pytest.raises(BadInput) as exc:
        notify.check_url(url)
    assert "hunter2" not in str(exc.value) and str(exc.value).startswith("--webhook: ")


def test_redact() -> None:
    assert notify.redact("https://u:p@hooks.slack.com/services/T/B/X?a=1#f") == (
        "https://…@hooks.slack.com/…")
    assert notify.redact("http://[::1]:8080/") == "http://[::1]:8080"


# -------------------------------------------------------------------- CLI wiring (_run)

def test_run_wires_metrics_file_and_webhook(fresh: Journal, hook: Hook, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeController:
        def __init__(self, j: Journal, rid: str, **_kw: Any):
            self.j, self.rid = j, rid

        def run(self, *, resume: bool) -> str:
            self.j.set_rollout(self.rid, "running", wave=3, phase="applying")
            for h in WAVES[2]:
                self.j.set_host(self.rid, h, "healthy", "applied and verified")
            self.j.set_rollout(self.rid, "completed")
            return "completed"

    # rollout_cmd imports the controller when a run starts (its module stays light).
    monkeypatch.setattr(engine, "Controller", FakeController)
    prom = tmp_path / "rollout.prom"
    with pytest.raises(typer.Exit) as exc:
        rollout_cmd._run(fresh, RID, rollout_cmd.Drive(Output.json, lease_ttl=30,
                                                       metrics_file=prom, webhook=hook.url),
                         resume=True)
    assert exc.value.exit_code == 0
    s = parse(prom.read_text())
    assert value(s, "fleetgate_rollout_state", state="completed") == 1
    assert value(s, "fleetgate_rollout_hosts", state="healthy") == 4
    # _run waited for the notification before returning.
    assert [r["json"]["trigger"] for r in hook.requests] == ["completed"]


def test_start_rejects_bad_telemetry_flags_before_anything(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    env = {"FLEETGATE_STATE_DIR": str(tmp_path)}
    p = fleetgate("rollout", "start", "no-such-plan.yml", "--webhook", "ftp://ops:hunter2@h/x",
                  env=env)
    assert p.returncode == 2 and "hunter2" not in p.stderr
    assert p.stderr == "fleetgate: --webhook: ftp://…@h/…: only http and https webhooks are " \
                       "supported\n"
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(tmp_path))
    with pytest.raises(BadInput, match=re.escape("*.prom")):
        rollout_cmd.start(Path("no-such-plan.yml"), metrics_file=tmp_path / "m.txt")
    with pytest.raises(BadInput, match="no such directory"):
        rollout_cmd.resume(RID, metrics_file=tmp_path / "no" / "m.prom")
    assert not (tmp_path / "rollouts" / "journal.db").exists()


def test_a_host_whose_drain_failed_is_unchanged_counts_as_failed_and_is_planned_again(
        tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "driver-575", "/srv/inventory.yml", report_data_artifact(), WAVES)
    why = ("drain failed at task 'Drain the Slurm node and wait until its jobs have ended' on "
           "gpu-a01: drain of Slurm node gpu-a01 timed out after 10s, still running there: job "
           "41 'train' (root); nothing applied; node resumed by fleetgate (now ALLOCATED)")
    j.set_host(RID, "gpu-a01", "draining")
    j.set_host(RID, "gpu-a01", "drain_failed", why)
    for h in HOSTS[1:]:
        j.set_host(RID, h, "skipped", "rollout halted before this host started")
    j.set_rollout(RID, "halted", reason="rollout budget exceeded")
    s = status.summary(j, RID)
    assert s["budget"]["failed"] == 1 and s["waves"][0]["failed"] == 1
    assert s["fleet"][0] == ("1 unchanged: its drain failed (the reason says how the node was "
                             f"left): gpu-a01 ({why})")
    # Not held, so no heal or diagnose for it: it goes into the next plan with the others.
    assert not any("--limit gpu-a01" in x for x in s["next_steps"])
    assert "fleetgate rollout plan /srv/plans/driver-575.yml" in s["next_steps"]


def test_markdown_keeps_a_long_reason_whole(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "driver-575", "/srv/inventory.yml", report_data_artifact(), WAVES)
    why = "drain failed: still running there: " + ", ".join(
        f"job {n} 'train-{n}' (user{n})" for n in range(40))
    j.set_host(RID, "gpu-a01", "drain_failed", why)
    j.set_rollout(RID, "halted", reason="rollout budget exceeded")
    text = report_md.render(j, RID)
    assert len(why) > 1000 and f"`{why}`" in text


def test_canary_plot_labels_its_unit_says_fail_in_red_and_shows_the_score() -> None:
    from fleetgate.rollout import report_plots

    d = report_plots.Distribution(
        group="wave 2 canary", metric="gemm.tflops", direction="higher", tolerance=0.05,
        ref_label="baseline", new_label="canary", reference=[10.0, 10.2, 9.9, 10.1],
        candidate=[5.1, 5.0, 5.2, 4.9], outcome="fail", relative_shift=-0.5)
    svg = report_plots.distribution_svg("wave 2 canary", [d], outcome="fail", score=12.5)
    # Text stays text in the SVG (svg.fonttype none), so the words can be read back.
    assert "gemm.tflops (TFLOPS)" in svg
    assert "wave 2 canary: FAIL, score 12.5 / 100" in svg
    assert "FAIL -50.0%" in svg
    red = report_plots.TITLE_COLOUR["fail"]
    assert svg.count(f"fill: {red}") + svg.count(f"fill:{red}") >= 2, "title and suptitle"
    width = float(re.search(r'viewBox="0 0 ([0-9.]+) ', svg).group(1))  # type: ignore[union-attr]
    assert 380 <= width <= 620, width  # about 520 px for one panel
    passed = report_plots.distribution_svg(
        "wave 1 canary", [dataclasses.replace(d, outcome="pass")], outcome="pass",
        score=97.0)
    assert f"fill: {red}" not in passed and "score 97.0 / 100" in passed


def test_a_held_host_of_a_lab_gets_the_lab_heal_command(tmp_path: Path) -> None:
    """The lab is the CLI's to know (rollout/ imports nothing of it): `rollout status`, its
    report and its webhook say `lab heal`; the rollout package alone says `diagnose`."""
    lab = tmp_path / "my lab"
    lab.mkdir()
    (lab / ".fleetgate-lab").touch()
    (lab / "inventory.yml").write_text("all: {}\n")
    j = Journal(tmp_path / "rollouts" / "journal.db")
    j.create_rollout(RID, "driver-575", str(lab / "inventory.yml"), report_data_artifact(),
                     WAVES)
    j.set_host(RID, "gpu-a01", "failed_held", "gate discovery fail")
    j.set_rollout(RID, "halted", reason="rollout budget exceeded")
    # Quoted for the shell: the lab directory has a space in it.
    heal = f"fleetgate lab --lab-dir '{lab}' heal gpu-a01"
    steps = status.summary(j, RID, held_step=rollout_cmd.held_step)["next_steps"]
    assert heal in steps, steps
    assert not any(x.startswith("fleetgate diagnose") for x in steps)
    assert notify.payload(j, RID, "halt", {}, held_step=rollout_cmd.held_step)[
        "next_steps"] == steps
    assert f"fleetgate diagnose -i '{lab}/inventory.yml' --limit gpu-a01" in status.summary(
        j, RID)["next_steps"]
    # What an operator reads: the status the CLI prints, and the report it writes.
    md = tmp_path / "r.md"
    env = {"FLEETGATE_STATE_DIR": str(tmp_path)}
    proc = fleetgate("rollout", "status", RID, env=env)
    assert proc.returncode == 10 and f"  {heal}\n" in proc.stdout, proc.stdout + proc.stderr
    proc = fleetgate("rollout", "report", RID, "--md", str(md), env=env)
    assert proc.returncode == 0, proc.stderr
    assert heal in md.read_text() and "fleetgate diagnose" not in md.read_text()


def test_a_held_host_of_an_inventory_beside_no_lab_marker_is_diagnosed(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yml"  # a lab's file name, but no .fleetgate-lab beside it
    assert rollout_cmd.held_step(str(inv), "h1") == f"fleetgate diagnose -i {inv} --limit h1"
    (tmp_path / ".fleetgate-lab").touch()
    assert rollout_cmd.held_step(str(tmp_path / "hosts.yml"), "h1").startswith(
        "fleetgate diagnose -i ")
    assert rollout_cmd.held_step(str(inv), "h1") == (
        f"fleetgate lab --lab-dir {tmp_path} heal h1")


def test_history_says_who_approved_without_the_signature_blob(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.db")
    j.create_rollout(RID, "driver-575", "/srv/inventory.yml", report_data_artifact(), WAVES)
    sig = "-----BEGIN SSH SIGNATURE-----\n" + "A" * 400 + "\n-----END SSH SIGNATURE-----\n"
    j.request(RID, "approve", "canary looks fine", wave=2, by="alice (SHA256:abc)",
              proof={"signature": sig, "namespace": "fleetgate-approval"})
    line = status.history_line(j.events(RID, kinds=("approve",))[-1])
    assert line.endswith(" approve w2: by alice (SHA256:abc) (signed) (canary looks fine)"), line
    assert "BEGIN SSH SIGNATURE" not in line and "AAAA" not in line


@pytest.mark.parametrize(("mode", "ref", "new"), [("baseline", "baseline", "canary"),
                                                   ("promoted", "promoted", "canary"),
                                                   ("self", "before", "after")])
def test_the_metric_table_names_the_sides_the_verdict_compared(mode: str, ref: str,
                                                               new: str) -> None:
    head = report_html._metric_table({"mode": mode, "metrics": []}).split("</tr>", 1)[0]
    assert f"<th>{ref} median</th><th>{new} median</th>" in head, head
    assert f"n {new}/{ref}" in head


# ------------------------------------------------- a real journal: `make demo`, both rollouts

def test_the_demo_kernel_update_report_states_the_change_each_host_made(tmp_path: Path) -> None:
    """The controller's own readings of two lab VMs before and after a real kernel update."""
    j = lab_journal(tmp_path, DEMO_SQL)
    text = report_md.render(j, DEMO_KERNEL)
    assert text.startswith("**COMPLETED**: `kernel 6.1.0-55-cloud-amd64 → 6.1.0-57-cloud-amd64; "
                           "manifest.class_version 1 → 2` on class `lab-vm`, 2 hosts (2 "
                           "healthy), 17m24s, by ")
    versions = text.split("**Versions (before → after)**", 1)[1].split("**Next steps**", 1)[0]
    (line,) = [x for x in versions.splitlines() if x.startswith("- ")]
    # One line for both hosts: they changed alike, and bookkeeping (when the manifest was
    # written, the machine it was verified on) no longer sets them apart or buries the kernel.
    assert line.startswith("- `lab-v01`, `lab-v02`: `kernel 6.1.0-55-cloud-amd64 → "
                           "6.1.0-57-cloud-amd64`; `manifest.class_version 1 → 2`")
    assert "`manifest.verified.kernel.default_boot 6.1.0-55-cloud-amd64 → " \
           "6.1.0-57-cloud-amd64`" in line
    assert not any(k in line for k in report_data.BOOKKEEPING)
    page = report_html.render(j, DEMO_KERNEL)
    folded = page.split("<section id=versions>", 1)[1].split("</section>", 1)[0]
    assert "manifest.updated_at" in folded.split("<details>", 1)[1]  # kept, folded away


def test_the_demo_bad_blas_report_says_what_halted_it_and_what_was_spared(
        tmp_path: Path) -> None:
    j = lab_journal(tmp_path, DEMO_SQL)
    text = report_md.render(j, DEMO_BLAS)
    assert text.startswith("**HALTED**: `class_version 1 → 2; verified.userland.blas openblas → "
                           "reference` on class `lab-cpu`, 5 hosts (1 rolled_back, 4 skipped)")
    assert ("- 1 rolled back and verified on the old version: `lab-c01`: `canary analysis "
            "failed (gemm.tflops)") in text
    assert "- 4 untouched (skipped): `lab-c02`, `lab-c03`, `lab-c04`, `lab-c05`" in text
    assert report_data.explain_wave(j, DEMO_BLAS, 1).splitlines()[0].endswith(
        "canary lab-c01 judged against baseline lab-c02, lab-c03: FAIL")
