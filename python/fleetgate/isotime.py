"""The one timestamp format fleetgate prints: progress lines, history, status, reports."""

from __future__ import annotations

import datetime as dt


def iso(ts: float | None) -> str:
    """ISO-8601 UTC with milliseconds: sortable, unambiguous, and what log shippers parse."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(float(ts), dt.UTC).isoformat(timespec="milliseconds"
                                                                  ).replace("+00:00", "Z")
