"""What the fault points of ``celery_cronstore.faults`` do in the harness's processes.

:func:`install_from_env` (called by ``harness/app.py``, the app every harness process
loads) reads ``CRONSTORE_FAULTS`` and installs the hook that acts on it; without the
variable nothing is installed and every point stays inert.

``CRONSTORE_FAULTS`` is a comma-separated list of ``point:when[:action]``:

* ``point`` is one of :data:`POINTS`;
* ``when`` is a probability per hit (``0.05``) or ``#N`` (only the N-th hit, 1-based);
* ``action`` is ``kill`` (default: SIGKILL this process, like ``kill -9``), ``raise``
  (raise :class:`InjectedFault`, a ``ConnectionError``, so beat backs off as after a
  lost connection) or ``stallS`` (sleep S seconds, e.g. ``stall12``: a pause longer than
  the lease).

Example: ``CRONSTORE_FAULTS="after_claim:0.02,after_publish:0.05:raise,mid_batch:#3"``.
``CRONSTORE_FAULTS_SEED`` makes the random draws repeatable.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time
from dataclasses import dataclass

from celery_cronstore import faults

__all__ = ["ENV", "InjectedFault", "Rule", "install_from_env", "parse"]

logger = logging.getLogger("celery.beat")

ENV = "CRONSTORE_FAULTS"

POINTS = faults.POINTS
_ACTIONS = ("kill", "raise", "stall")


class InjectedFault(ConnectionError):
    """Raised by a fault point whose action is ``raise``."""


@dataclass(frozen=True)
class Rule:
    """One parsed ``point:when:action`` item."""

    point: str
    probability: float | None
    nth: int | None
    action: str
    stall: float = 0.0


def parse(spec: str) -> dict[str, Rule]:
    """Parse a ``CRONSTORE_FAULTS`` value; raise ``ValueError`` naming the bad item."""
    rules: dict[str, Rule] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        fields = item.split(":")
        if len(fields) not in (2, 3):
            raise ValueError(f"{ENV}: {item!r} is not point:when[:action]")
        point, when = fields[0], fields[1]
        action = fields[2] if len(fields) == 3 else "kill"
        if point not in POINTS:
            raise ValueError(f"{ENV}: unknown fault point {point!r} (known: {', '.join(POINTS)})")
        probability = nth = None
        try:
            if when.startswith("#"):
                nth = int(when[1:])
                if nth < 1:
                    raise ValueError
            else:
                probability = float(when)
                if not 0.0 < probability <= 1.0:
                    raise ValueError
        except ValueError:
            raise ValueError(
                f"{ENV}: {when!r} in {item!r} is neither a probability in (0, 1] nor #N"
            ) from None
        kind, seconds = action.rstrip("0123456789."), action.lstrip("abcdefghijklmnopqrstuvwxyz")
        try:
            stall = float(seconds) if kind == "stall" else 0.0
        except ValueError:
            stall = -1.0
        if kind not in _ACTIONS or stall < 0 or (kind != "stall" and seconds):
            raise ValueError(
                f"{ENV}: unknown action {action!r} in {item!r} (kill, raise or stallS)"
            )
        rules[point] = Rule(point, probability, nth, kind, stall)
    return rules


def install_from_env() -> None:
    """Install the hook for ``CRONSTORE_FAULTS`` (and its ``_SEED``), if it is set."""
    rules = parse(os.environ.get(ENV, ""))
    if not rules:
        return
    counts: dict[str, int] = {}
    draws = random.Random(os.environ.get(f"{ENV}_SEED"))

    def hook(point: str) -> None:
        rule = rules.get(point)
        if rule is not None:
            _act(rule, counts, draws)

    faults.install(hook)


def _act(rule: Rule, counts: dict[str, int], draws: random.Random) -> None:
    point = rule.point
    count = counts[point] = counts.get(point, 0) + 1
    if rule.nth is not None:
        if count != rule.nth:
            return
    elif draws.random() >= (rule.probability or 0.0):
        return
    logger.warning("beat: fault point %s: %s (hit %d)", point, rule.action, count)
    if rule.action == "kill":
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if rule.action == "stall":
        time.sleep(rule.stall)
        return
    raise InjectedFault(f"fault injected at {point}")
