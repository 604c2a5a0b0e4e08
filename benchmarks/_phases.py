"""Where a dispatch's time goes: wall time spent inside a fixed list of beat's functions.

:func:`timed` wraps each function of :data:`PHASES` (its module or class attribute)
with a ``time.perf_counter`` accumulator for the duration of a ``with`` block and
restores it after; :func:`rows` turns the totals into table rows (milliseconds, and
microseconds per fire). A nested phase is shown under its caller (marked ``-`` per level)
and is included in it. The wrapper costs about 0.3 µs a call, so phases called once per fire
read a little high; cProfile (``--profile``) slows every call instead, by 1.5-2x.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

#: (depth, label, "module:attribute" or "module:Class.method").
PHASES: tuple[tuple[int, str, str], ...] = (
    (0, "claim transaction", "celery_cronstore.store.claims:Claimer.claim_due"),
    (1, "plan each due row", "celery_cronstore.store.claims:Claimer._plan_row"),
    (2, "read the row (read_task)", "celery_cronstore.store.claims:read_task"),
    (2, "refusal checks", "celery_cronstore.store.claims:Claimer.problem"),
    (2, "policy.plan", "celery_cronstore.store.claims:Claimer._plan"),
    (1, "insert the ledger rows", "celery_cronstore.store.claims:write_ledger"),
    (1, "update the due rows", "celery_cronstore.store.claims:write_rows"),
    (0, "publish", "celery_cronstore.beat.send:Sender.publish"),
    (1, "sending write / re-check", "celery_cronstore.beat.send:Sender._intend"),
    (1, "build and buffer each message", "celery_cronstore.beat.dispatch:Dispatcher.send"),
    (0, "mark published (after the burst)", "celery_cronstore.beat.send:Sender.mark"),
)


@contextlib.contextmanager
def timed() -> Iterator[tuple[Counter[str], Counter[str]]]:
    """Yield (seconds, calls) by label, counted while the block runs."""
    seconds: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    undo: list[tuple[Any, str, Any]] = []
    for _, label, where in PHASES:
        module_name, _, path = where.partition(":")
        owner: Any = importlib.import_module(module_name)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part)
        real = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        undo.append((owner, name, real))
        setattr(owner, name, _counting(real, label, seconds, calls))
    try:
        yield seconds, calls
    finally:
        for owner, name, real in reversed(undo):
            setattr(owner, name, real)


def _counting(real: Any, label: str, seconds: Counter[str], calls: Counter[str]) -> Any:
    def counted(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            seconds[label] += time.perf_counter() - began
            calls[label] += 1

    return counted


def rows(seconds: Counter[str], calls: Counter[str], fires: int, total: float) -> list[list[str]]:
    """Table rows: phase (indented by depth), ms, µs per fire, calls; then the rest."""
    out = []
    for depth, label, _ in PHASES:
        spent = seconds[label]
        out.append(
            [
                "- " * depth + label,
                f"{spent * 1000:,.0f}",
                f"{spent / fires * 1e6:,.1f}",
                f"{calls[label]:,}",
            ]
        )
    top = sum(seconds[label] for depth, label, _ in PHASES if depth == 0)
    rest = total - top
    for label, spent in (("the rest (ticks, peeks, held fires)", rest), ("dispatch", total)):
        out.append([label, f"{spent * 1000:,.0f}", f"{spent / fires * 1e6:,.1f}", ""])
    return out
