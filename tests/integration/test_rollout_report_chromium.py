"""The rollout report in a real browser: headless Debian chromium renders the HTML page with
every route to the network dead, and the screenshot must show the page and its plots.

Network: chromium runs behind a proxy that does not exist (loopback included) and logs its
network activity; a request the page itself makes (initiator: the file's origin) would show
up there. A control page with one external image proves the log catches it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fleetgate.rollout import report_html, report_plots
from tests.fixtures.rollout.journal_builder import RID, build_journal

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WIDTH, HEIGHT = 1400, 4200

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="chromium not installed (scripts/install-system-deps.sh)")


def hex_rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def render(page: Path, tmp: Path, name: str) -> tuple[np.ndarray, list[str]]:
    """Screenshot of `page` and the http(s)/ws URLs the page itself asked for."""
    shot, netlog = tmp / f"{name}.png", tmp / f"{name}-net.json"
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--disable-extensions", f"--user-data-dir={tmp / f'{name}-profile'}",
         # Nowhere to go: every request, loopback included, goes to a proxy that is not there.
         "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--log-net-log={netlog}",
         f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    # chromium's own housekeeping (time sync, update checks) has no origin; anything the page
    # loads has the file's origin as its initiator and network isolation key.
    asked = [e["params"]["url"] for e in log["events"]
             if e["type"] == start_job and "file://" in str(
                 e.get("params", {}).get("network_isolation_key", ""))]
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(np.int32)
    return pixels, [u for u in asked if u.split(":", 1)[0] in ("http", "https", "ws", "wss")]


def near(pixels: np.ndarray, colour: str, *, alpha: float = 1.0, tol: int = 30) -> np.ndarray:
    """Pixels of `colour` drawn with `alpha` over white."""
    want = np.array([alpha * c + (1 - alpha) * 255 for c in hex_rgb(colour)])
    diff: np.ndarray = np.abs(pixels - want).sum(axis=2)
    return diff < tol


def test_report_renders_offline_in_chromium(tmp_path: Path) -> None:
    j, _ = build_journal(tmp_path / "journal.db")
    page = tmp_path / "report.html"
    page.write_text(report_html.render(j, RID))
    pixels, asked = render(page, tmp_path, "report")

    assert asked == []  # the page needed nothing from any network
    assert pixels.shape == (HEIGHT, WIDTH, 3)
    ink = np.abs(pixels - 255).sum(axis=2) > 30
    assert ink.mean() > 0.03, "the page is (nearly) blank"
    assert ink[:120].mean() > 0.01, "no title/summary at the top"

    # The timeline: bars of each step in their colours, in one band of the page.
    apply = near(pixels, report_plots.PHASE_STYLE["apply"][0])
    for phase, least in (("apply", 2000), ("verify", 500), ("rollback", 1000),
                         ("approval", 1000)):
        n = int(near(pixels, report_plots.PHASE_STYLE[phase][0]).sum())
        assert n >= least, f"timeline {phase} bars: {n} pixels"
    ys, xs = np.nonzero(apply)
    band = ink[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
    assert band.mean() > 0.05, "the timeline region is (nearly) empty"

    # Below it, the canary distributions: sample points (drawn at alpha 0.85), and the
    # tolerance lines and verdict titles in the fail/pass colours.
    below = pixels[ys.max():]
    assert int(near(below, report_plots.REF_COLOUR, alpha=0.85).sum()) >= 100, \
        "no baseline samples drawn"
    # Each sample point is a 16-px² marker (~6 px of its own colour inside its edge): the one
    # passing canary has 5 samples per metric, the failed wave-2 canaries 5 each as well.
    assert int(near(below, report_plots.OUTCOME_COLOUR["pass"], alpha=0.85).sum()) >= 40, \
        "no passing canary samples drawn"
    assert int(near(below, report_plots.OUTCOME_COLOUR["fail"], alpha=0.85).sum()) >= 40, \
        "no failing canary samples drawn"
    assert int(near(below, report_plots.THRESHOLD_COLOUR).sum()) >= 100, \
        "no tolerance lines drawn"


def test_network_log_catches_a_page_that_calls_out(tmp_path: Path) -> None:
    """The control for the check above: an external reference is seen and counted."""
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://example.invalid/x.png">'
                    "<p>control</p></body></html>")
    _, asked = render(page, tmp_path, "control")
    assert asked == ["http://example.invalid/x.png"]


def measured_dom(page: Path, tmp: Path, name: str, width: int) -> str:
    """The DOM chromium built at `width`, with the page's scroll and client widths written into
    its title by a probe script (the report itself has no script, and its CSP forbids one, so
    the probe runs on a copy without the CSP)."""
    probe = tmp / f"{name}-probe.html"
    text = page.read_text()
    text = text.split('<meta http-equiv="Content-Security-Policy"')[0] + "<meta " + \
        text.split('<meta http-equiv="Content-Security-Policy"', 1)[1].split(">", 1)[1]
    probe.write_text(text.replace(
        "</body>", "<script>document.title='W='+document.documentElement.scrollWidth+'/'+"
        "document.documentElement.clientWidth</script></body>"))
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp / f'{name}-profile'}", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--window-size={width},2000", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.parametrize("which", ["halted", "kernel", "demo-kernel"])
def test_report_fits_1280_px_and_shows_the_version_change(tmp_path: Path, which: str) -> None:
    """`demo-kernel` is a real journal: `make demo`'s kernel update of two lab VMs."""
    from tests.fixtures.rollout.journal_builder import (
        KERNEL_NEW,
        KERNEL_OLD,
        build_kernel_journal,
    )
    from tests.unit.test_rollout_report import DEMO_KERNEL, DEMO_SQL, lab_journal

    j, rid = (build_journal(tmp_path / "j.db") if which == "halted"
              else build_kernel_journal(tmp_path / "k.db") if which == "kernel"
              else (lab_journal(tmp_path, DEMO_SQL), DEMO_KERNEL))
    page = tmp_path / f"{which}.html"
    page.write_text(report_html.render(j, rid))
    dom = measured_dom(page, tmp_path, which, 1280)
    widths = dom.split("<title>W=", 1)[1].split("</title>", 1)[0]
    scroll, client = map(int, widths.split("/"))
    assert scroll <= client, f"horizontal overflow at 1280 px: {scroll} > {client}"
    versions = dom.split('<section id="versions">', 1)[1].split("</section>", 1)[0]
    if which != "halted":
        # The kernel-update rollout: old and new kernel side by side, per host group.
        changed = versions.split('<table class="versions">', 1)[1].split("<details>", 1)[0]
        assert (f'<span class="changed">kernel</span> <code>{KERNEL_OLD}</code> → '
                f"<code>{KERNEL_NEW}</code>") in changed
        assert "<code>lab-v01</code>, <code>lab-v02</code>" in changed
        # The full manifest is there, folded away.
        assert versions.count("<details>") == 1 and "<details open" not in versions
