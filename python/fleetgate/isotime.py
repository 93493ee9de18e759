"""The one timestamp and duration format fleetgate prints: progress lines, history, status,
reports."""

from __future__ import annotations

import datetime as dt


def iso(ts: float | None) -> str:
    """ISO-8601 UTC with milliseconds: sortable, unambiguous, and what log shippers parse."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(float(ts), dt.UTC).isoformat(timespec="milliseconds"
                                                                  ).replace("+00:00", "Z")


def duration(seconds: float) -> str:
    s = round(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
