"""Absolute floors: one measured value against one limit. No statistics, no peers."""

from __future__ import annotations

from typing import Literal

Better = Literal["higher", "lower"]


def breach(value: float | None, limit: float | None, better: Better) -> bool:
    """True when a limit is set and the value misses it. A missing value misses any floor: no
    number is no evidence that the floor holds."""
    if limit is None:
        return False
    if value is None:
        return True
    return value < limit if better == "higher" else value > limit
