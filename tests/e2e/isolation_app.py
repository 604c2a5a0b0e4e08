"""The e2e app plus what the isolation tests need: a task with a fixed signature, the
fault points of ``CRONSTORE_FAULTS`` (the harness's hook, where this tree has one), and a
line naming the ``celery_cronstore`` each process runs (the before/after comparison runs
these tests against an older checkout through ``PYTHONPATH``)."""

from __future__ import annotations

import json
import os
import sys
import time

from e2e_app import app, record

import celery_cronstore

try:  # this tree: fault points act only once a hook is installed
    from harness.faults import install_from_env
except ImportError:  # older trees read CRONSTORE_FAULTS in celery_cronstore.faults itself
    pass
else:
    install_from_env()

__all__ = ["app", "pair", "record"]

print(f"isolation_app: celery_cronstore from {celery_cronstore.__file__}", file=sys.stderr)


@app.task(name="e2e.pair", bind=True)
def pair(self, a: object, b: object) -> None:  # type: ignore[no-untyped-def]
    """Record a delivery like ``e2e.record``, for a task whose args Celery checks."""
    line = json.dumps(
        {"task_id": self.request.id, "args": [a, b], "at": time.time(), "worker": "pair"}
    )
    with open(os.environ["E2E_RECORD"], "a", encoding="utf-8") as out:
        out.write(line + "\n")
