"""The report's figures, drawn by matplotlib and returned as SVG text to inline in HTML.

Figures are built with the object API on an Agg canvas, never through pyplot: no global
figure state, so a report can be rendered from any thread (serve-metrics, a controller).
Text stays text (svg.fonttype none): the page stays small, searchable and selectable.
"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Sequence

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from fleetgate.rollout.report_data import ROLLOUT_ROW, Bar, Distribution, when

PHASE_STYLE = {  # phase -> (colour, legend label); colour-blind safe (Okabe-Ito)
    "drain": ("#999999", "drain"),
    "apply": ("#0072B2", "apply"),
    "verify": ("#E69F00", "verify (gates, canary)"),
    "rollback": ("#CC79A7", "rollback"),
    "soak": ("#009E73", "soak"),
    "baseline": ("#56B4E9", "measuring baseline"),
    "approval": ("#882255", "awaiting approval"),
    "window": ("#DDCC77", "waiting for window"),
}
OUTCOME_COLOUR = {"pass": "#009E73", "fail": "#D55E00", "nodata": "#999999", None: "#0072B2"}
REF_COLOUR = "#56B4E9"
THRESHOLD_COLOUR = "#D55E00"
TITLE_COLOUR = {"fail": "#cf222e", "pass": "#1a7f37"}  # the page's own red and green
MAX_HOSTS = 300  # beyond this the timeline is unreadable anyway; the table lists every host


def _label(text: str) -> str:
    # Data never reaches mathtext: a host or metric name with `$` must print as itself.
    return text.replace("$", r"\$")


def svg(fig: Figure) -> str:
    """The figure as an <svg> element for an HTML page: no XML prolog, no DOCTYPE (it names
    a DTD URL), no namespace URIs (HTML parsers supply them), ids unique per figure."""
    FigureCanvasAgg(fig)
    buf = io.StringIO()
    salt = uuid.uuid4().hex
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight",
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text, count=2)
    # Group ids such as "figure_1" repeat in every figure; prefixing them keeps the page's
    # ids unique without touching the hashed ids that url(#...) references use.
    return re.sub(r'id="([A-Za-z][A-Za-z0-9.]*_[0-9]+)"', f'id="f{salt[:8]}-\\1"', text)


def _unit(span: float) -> tuple[float, str]:
    if span <= 600:
        return 1.0, "seconds"
    if span <= 6 * 3600:
        return 60.0, "minutes"
    return 3600.0, "hours"


def timeline_svg(bars: Sequence[Bar], hosts: Sequence[tuple[str, int, str]], t0: float,
                 t_end: float) -> str:
    """Gantt chart: a row per host (wave order), a bar per pipeline step and soak, a thin
    black line per ansible batch; on top, the rollout's own waits. `hosts` is (name, wave,
    final state)."""
    rows = list(hosts)[:MAX_HOSTS]
    if any(b.host == ROLLOUT_ROW for b in bars):
        rows.insert(0, (ROLLOUT_ROW, 0, ""))
    index = {h: i for i, (h, _, _) in enumerate(rows)}
    span = max(t_end - t0, 1e-3)
    scale, unit = _unit(span)
    fig = Figure(figsize=(12, 1.6 + 0.32 * max(len(rows), 1)))
    ax = fig.add_subplot()
    # A step shorter than a pixel still shows, so a failed-at-once host is not invisible.
    min_w = span / scale / 400
    for phase, (colour, _) in PHASE_STYLE.items():
        for b in (b for b in bars if b.phase == phase and b.host in index):
            ax.barh(index[b.host], max((b.end - b.start) / scale, min_w),
                    left=(b.start - t0) / scale, height=0.6, color=colour,
                    alpha=0.45 if phase == "soak" else 0.95,
                    hatch="//" if b.open else None, edgecolor="#333333" if b.open else colour,
                    linewidth=0.5)
    for b in (b for b in bars if b.phase == "batch" and b.host in index):
        ax.plot([(b.start - t0) / scale, max((b.end - t0) / scale,
                                             (b.start - t0) / scale + min_w)],
                [index[b.host]] * 2, color="#000000", linewidth=1.2, solid_capstyle="butt")
    waves = [w for _, w, _ in rows]
    for i in range(1, len(rows)):
        if waves[i] != waves[i - 1]:
            ax.axhline(i - 0.5, color="#bbbbbb", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(rows)), [_label(f"w{w} {h} · {state}") if h != ROLLOUT_ROW
                                     else "rollout" for h, w, state in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, span / scale * 1.02)
    ax.set_xlabel(f"{unit} since {when(t0)}")
    ax.grid(axis="x", color="#eeeeee")
    drawn = {b.phase for b in bars}
    handles = [Patch(color=c, label=lab, alpha=0.45 if p == "soak" else 0.95)
               for p, (c, lab) in PHASE_STYLE.items() if p in drawn or p in ("apply", "verify")]
    if any(b.open for b in bars):
        handles.append(Patch(facecolor="white", edgecolor="#333333", hatch="//",
                             label="still in progress"))
    ax.plot([], [], color="#000000", linewidth=1.2, label="ansible batch")
    ax.legend(handles=[*handles, *ax.get_lines()[-1:]], loc="upper center",
              bbox_to_anchor=(0.5, -0.5 / max(len(rows), 1) - 0.08), ncols=5, fontsize=8,
              frameon=False)
    return svg(fig)


def _fmt(x: float) -> str:
    return f"{x:.4g}"


# The unit a metric's name ends in, for the y-axis label.
UNITS = (("tflops", "TFLOPS"), ("gflops", "GFLOPS"), ("_ms", "ms"), ("_s", "s"),
         ("gbps", "GB/s"), ("busbw", "GB/s"), ("tokens_per_s", "tokens/s"), ("_pct", "%"))


def unit_of(metric: str) -> str:
    leaf = metric.lower().rsplit(".", 1)[-1]
    for suffix, unit in UNITS:
        if leaf.endswith(suffix) or leaf == suffix.strip("_"):
            return unit
    return "value"


def distribution_svg(group: str, dists: Sequence[Distribution], *,
                     outcome: str | None = None, score: float | None = None) -> str:
    """Per metric: reference and candidate samples as jittered strips over box plots, the
    reference median, and the tolerance threshold the canary median must not cross. Drawn
    at about 520 px a panel with 11 pt text, so it reads at the page's size; the verdict and
    score head the figure, red when it failed."""
    n = len(dists)
    cols = min(n, 2)
    nrows = (n + cols - 1) // cols
    fig = Figure(figsize=(5.6 * cols, 4.2 * nrows + 0.6))
    rng = np.random.default_rng(0)  # fixed jitter: the same journal gives the same picture
    for i, d in enumerate(dists):
        ax = fig.add_subplot(nrows, cols, i + 1)
        sides = [(d.ref_label, d.reference, REF_COLOUR),
                 (d.new_label, d.candidate, OUTCOME_COLOUR.get(d.outcome, "#0072B2"))]
        present = [(x, vals) for x, (_, vals, _) in enumerate(sides) if vals]
        if present:
            ax.boxplot([vals for _, vals in present], positions=[x for x, _ in present],
                       widths=0.45, showfliers=False,
                       medianprops={"color": "#000000", "linewidth": 1.4},
                       boxprops={"color": "#555555"}, whiskerprops={"color": "#555555"},
                       capprops={"color": "#555555"})
        for x, (_, vals, colour) in enumerate(sides):
            if vals:
                ax.scatter(x + rng.uniform(-0.12, 0.12, len(vals)), vals, s=16, color=colour,
                           alpha=0.85, edgecolors="#333333", linewidths=0.4, zorder=3)
            else:
                ax.text(x, 0.5, "no samples", transform=ax.get_xaxis_transform(),
                        ha="center", color="#999999", fontsize=10)
        med, thr = d.ref_median, d.threshold
        if med is not None and thr is not None:
            ax.axhline(med, color="#555555", linestyle=":", linewidth=1,
                       label=f"{d.ref_label} median {_fmt(med)}")
            sign = "-" if d.direction == "higher" else "+"
            ax.axhline(thr, color=THRESHOLD_COLOUR, linestyle="--", linewidth=1.2,
                       label=f"tolerance {sign}{d.tolerance:.0%}: {_fmt(thr)}")
            ax.legend(fontsize=9, loc="best")
        ax.set_xticks([0, 1], [d.ref_label, d.new_label])
        ax.set_xlim(-0.6, 1.6)
        verdict = (d.outcome or "not judged").upper()
        extra = f" {d.relative_shift:+.1%}" if d.relative_shift is not None else ""
        ax.set_title(_label(f"{d.metric} ({d.direction} is better): {verdict}{extra}"),
                     fontsize=11, color=TITLE_COLOUR.get(d.outcome or "", "#333333"),
                     fontweight="bold" if d.outcome == "fail" else "normal")
        ax.set_ylabel(_label(f"{d.metric} ({unit_of(d.metric)})"), fontsize=11)
        ax.tick_params(labelsize=10)
        ax.grid(axis="y", color="#eeeeee")
    head = group + (f": {outcome.upper()}" if outcome else "") + (
        f", score {score:.1f} / 100" if score is not None else "")
    fig.suptitle(_label(head), fontsize=13, x=0.01, ha="left",
                 color=TITLE_COLOUR.get(outcome or "", "#1d2327"),
                 fontweight="bold" if outcome == "fail" else "normal")
    fig.tight_layout()
    return svg(fig)
