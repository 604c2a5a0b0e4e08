"""Named fault points inside beat's tick: seams for the fault-injection harness.

Production code calls :func:`hit` where a crash would be most awkward. Nothing happens
unless a harness :func:`install`\\ s a hook (``harness/faults.py`` does, in the processes
it starts); then the hook decides what a point does (crash, raise, stall).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["POINTS", "hit", "install"]

#: The fault points and where they are.
POINTS = {
    "before_claim_commit": "claim rows written, transaction not yet committed",
    "after_claim": "claim committed, nothing published yet",
    "mid_batch": "after each message of a publish batch (some sent, none marked)",
    "after_publish": "every claim published, none marked published yet",
}

_hook: Callable[[str], None] | None = None


def install(hook: Callable[[str], None] | None) -> None:
    """Make :func:`hit` call ``hook(point)`` (``None``: make every point inert again)."""
    global _hook
    _hook = hook


def hit(point: str) -> None:
    """Pass fault point ``point``: nothing happens unless a harness installed a hook."""
    if _hook is not None:
        _hook(point)
