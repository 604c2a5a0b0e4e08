"""The settings table (from :class:`celery_cronstore.config.Config`) and the migrations."""

from __future__ import annotations

import dataclasses

from alembic.script import Script, ScriptDirectory

from celery_cronstore.config import Config
from celery_cronstore.store import migrate

from .markdown import code, prose, table


def gen_settings() -> str:
    """One row per ``Config`` field: its key, type, default and ``metadata["help"]``."""
    rows = []
    for item in dataclasses.fields(Config):
        if item.default_factory is not dataclasses.MISSING:
            default = item.default_factory()
        else:
            default = item.default
        help_text = item.metadata.get("help")
        if not help_text:
            raise SystemExit(
                f"Config.{item.name} has no help: give it field(..., metadata={{'help': ...}})"
            )
        rows.append(
            [
                f"[`cronstore_{item.name}`](#cronstore_{item.name})",
                code(str(item.type)),
                code(repr(default)),
                help_text.replace("``", "`"),
            ]
        )
    return table(["setting", "type", "default", "meaning"], rows)


def revisions() -> list[Script]:
    """Return the revisions this release ships, oldest first."""
    return list(ScriptDirectory.from_config(migrate._config()).walk_revisions())[::-1]


def gen_migrations() -> str:
    """The revisions this release ships, oldest first, with their docstring's first line."""
    rows = []
    for script in revisions():
        summary = (script.doc or "").strip().splitlines()[0] if script.doc else ""
        revises = script.down_revision
        shown = ", ".join(revises) if isinstance(revises, (list, tuple)) else revises or "-"
        rows.append([code(script.revision), code(shown), prose(summary)])
    return table(["revision", "revises", "what it does"], rows)
