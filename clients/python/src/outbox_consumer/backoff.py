"""Backoff as pure functions, the same policy as the Rust library's."""

from __future__ import annotations

import random


def nominal_delay(attempts: int, base: float, maximum: float) -> float:
    """``base * 2^(attempts-1)``, capped at ``maximum`` (seconds)."""
    exponent = min(max(attempts - 1, 0), 62)
    return float(min(base * (1 << exponent), maximum))


def jittered(nominal: float, unit: float) -> float:
    """Uniformly in ``[0.8, 1.0]`` of ``nominal``, driven by ``unit`` in ``[0, 1)``."""
    unit = min(max(unit, 0.0), 1.0)
    return nominal * (1.0 - 0.2 * unit)


def retry_delay(attempts: int, base: float, maximum: float, unit: float | None = None) -> float:
    """The wait before delivery ``attempts + 1`` of a failed entry."""
    return jittered(
        nominal_delay(attempts, base, maximum), random.random() if unit is None else unit
    )


def outage_pause(streak: int, unit: float | None = None) -> float:
    """The pause after ``streak`` failed round trips: 100 ms doubling to 5 s, with jitter."""
    return retry_delay(max(streak, 1), 0.1, 5.0, unit)
