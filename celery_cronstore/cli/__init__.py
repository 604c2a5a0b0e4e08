"""The operator command line: ``celery -A app cronstore ...`` (see ``docs/cli.md``).

Celery finds the group through the ``celery.commands`` entry point;
``python -m celery_cronstore.cli -A app cronstore ...`` runs the same thing without it.
"""

from __future__ import annotations

# Each command module registers its commands on the group when imported.
from celery_cronstore.cli import adopt as _adopt  # noqa: F401  (import)
from celery_cronstore.cli import alerts as _alerts  # noqa: F401  (alerts)
from celery_cronstore.cli import audit as _audit  # noqa: F401  (audit)
from celery_cronstore.cli import calendars as _calendars  # noqa: F401  (calendar ...)
from celery_cronstore.cli import check as _check  # noqa: F401  (check)
from celery_cronstore.cli import deployment as _deployment  # noqa: F401  (migrate, health)
from celery_cronstore.cli import files as _files  # noqa: F401  (export, apply)
from celery_cronstore.cli import fires as _fires  # noqa: F401  (next, history, run-now, backfill, ...)
from celery_cronstore.cli import pause as _pause  # noqa: F401  (pause, resume)
from celery_cronstore.cli import tasks as _tasks  # noqa: F401  (list, show, add, edit, ...)
from celery_cronstore.cli import web as _web  # noqa: F401  (web)
from celery_cronstore.cli.group import cronstore

# The ``celery`` command imports this package for its plugin commands in every process
# it starts: a worker then records the runs of beat's plain tasks, and beat warns when
# it runs another scheduler while cronstore_url is set (signal handlers).
from celery_cronstore import worker as _worker  # noqa: F401  isort: skip
from celery_cronstore.beat import checks as _checks  # noqa: F401  isort: skip  (another scheduler)

__all__ = ["cronstore", "main"]


def main(argv: list[str] | None = None) -> None:
    """Run ``celery`` with the ``cronstore`` group added (even without the entry point)."""
    from celery.bin.celery import celery

    if "cronstore" not in celery.commands:
        celery.add_command(cronstore)
    celery.main(args=argv, prog_name="celery")
