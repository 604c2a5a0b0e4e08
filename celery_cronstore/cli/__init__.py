"""The operator command line: ``celery -A app cronstore ...`` (see ``docs/cli.md``).

Celery finds the group through the ``celery.commands`` entry point;
``python -m celery_cronstore.cli -A app cronstore ...`` runs the same thing without it.
"""

from __future__ import annotations

from celery_cronstore.cli import ops as _ops  # noqa: F401  (registers its commands)
from celery_cronstore.cli import web as _web  # noqa: F401  (registers `web`)
from celery_cronstore.cli.commands import cronstore

__all__ = ["cronstore", "main"]


def main(argv: list[str] | None = None) -> None:
    """Run ``celery`` with the ``cronstore`` group added (even without the entry point)."""
    from celery.bin.celery import celery

    if "cronstore" not in celery.commands:
        celery.add_command(cronstore)
    celery.main(args=argv, prog_name="celery")
