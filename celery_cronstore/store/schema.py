"""Table definitions: the periodic-task definitions and the fire ledger.

The Alembic migrations in ``store/migrations`` create exactly these tables; a test checks
that the two agree.
"""

from __future__ import annotations

import sqlalchemy as sa

from celery_cronstore.store.types import UTCDateTime

__all__ = ["VERSION_TABLE", "alert", "audit", "beat", "fire", "metadata", "periodic_task"]

#: Alembic version table of our own, so the host application's Alembic is untouched.
VERSION_TABLE = "cronstore_alembic_version"

metadata = sa.MetaData()

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

periodic_task = sa.Table(
    "cronstore_periodic_task",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(200), nullable=False, unique=True),
    sa.Column("task", sa.String(200), nullable=False),
    sa.Column("args", sa.Text, nullable=False, server_default="[]"),
    sa.Column("kwargs", sa.Text, nullable=False, server_default="{}"),
    sa.Column("options", sa.Text, nullable=False, server_default="{}"),
    sa.Column("timer_kind", sa.String(16), nullable=False),
    sa.Column("timer", sa.String(500), nullable=False),
    sa.Column("tz", sa.String(64), nullable=False, server_default="UTC"),
    sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("owner_type", sa.String(100), nullable=True),
    sa.Column("owner_id", sa.String(200), nullable=True),
    sa.Column("description", sa.Text, nullable=False, server_default=""),
    sa.Column("source", sa.String(16), nullable=False, server_default="api"),
    # "1970-01-01" means "not planned yet" (see types.EPOCH); NULL means "no future fire".
    sa.Column(
        "next_run", UTCDateTime, nullable=True, server_default=sa.text("'1970-01-01 00:00:00'")
    ),
    sa.Column("last_fire", UTCDateTime, nullable=True),
    sa.Column("last_run", UTCDateTime, nullable=True),
    sa.Column("total_run_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("misfire_policy", sa.String(16), nullable=False, server_default="run_once"),
    sa.Column("misfire_limit", sa.Integer, nullable=False, server_default="100"),
    sa.Column("start_deadline", sa.Float, nullable=True),
    sa.Column("overlap_policy", sa.String(16), nullable=False, server_default="allow"),
    sa.Column("tolerance", sa.Float, nullable=True),
    sa.Column("max_retries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("resume_state", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.Column("version", sa.Integer, nullable=False, server_default="1"),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    # What becomes of a fire whose worker went silent: "leave" or "rerun" (migration 0006).
    sa.Column("abandon_policy", sa.String(16), nullable=False, server_default="leave"),
    # The task's dead man's switch ("3 periods", "6h"; NULL: the default) (migration 0007).
    sa.Column("alert_after", sa.String(32), nullable=True),
    # Scheduled fires after which it plans no more; NULL: no limit (migration 0009).
    sa.Column("max_runs", sa.Integer, nullable=True),
    # Seconds each fire may be delayed by (policy.jitter); NULL: none (migration 0010).
    sa.Column("jitter", sa.Float, nullable=True),
    # No fire before / after these instants; NULL: unbounded (migration 0011).
    sa.Column("start_at", UTCDateTime, nullable=True),
    sa.Column("end_at", UTCDateTime, nullable=True),
    # Set while paused: when, by whom, why, until when, then what (migration 0012).
    sa.Column("paused_at", UTCDateTime, nullable=True),
    sa.Column("paused_by", sa.String(200), nullable=True),
    sa.Column("paused_note", sa.Text, nullable=True),
    sa.Column("paused_until", UTCDateTime, nullable=True),
    sa.Column("paused_resume", sa.String(16), nullable=False, server_default="skip"),
    # The exclusion calendars it skips, by name, comma-separated (migration 0013).
    sa.Column("exclude", sa.String(500), nullable=True),
    sa.Index("ix_cronstore_periodic_task_due", "enabled", "next_run"),
    sa.Index("ix_cronstore_periodic_task_owner", "owner_type", "owner_id"),
    sa.Index("ix_cronstore_periodic_task_task", "task"),
)

fire = sa.Table(
    "cronstore_fire",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column(
        "periodic_task_id",
        _BigId,
        sa.ForeignKey("cronstore_periodic_task.id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("fire_time", UTCDateTime, nullable=False),
    # A "missed" row may stand for a run of grid points: fire_time .. fire_until, fire_count.
    sa.Column("fire_until", UTCDateTime, nullable=True),
    sa.Column("fire_count", sa.Integer, nullable=False, server_default="1"),
    sa.Column("task_id", sa.String(64), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("claimed_by", sa.String(200), nullable=True),
    sa.Column("lease_until", UTCDateTime, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("claimed_at", UTCDateTime, nullable=True),
    sa.Column("published_at", UTCDateTime, nullable=True),
    sa.Column("started_at", UTCDateTime, nullable=True),
    sa.Column("finished_at", UTCDateTime, nullable=True),
    sa.Column("node", sa.String(200), nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("result", sa.Text, nullable=True),
    # Times the fire was published again after its worker went silent (migration 0006).
    sa.Column("reruns", sa.Integer, nullable=False, server_default="0"),
    # A bad end's traceback for the failures view, bounded and scrubbed (migration 0007).
    sa.Column("detail", sa.Text, nullable=True),
    sa.UniqueConstraint("periodic_task_id", "fire_time", name="uq_cronstore_fire_task_time"),
    sa.UniqueConstraint("task_id", name="uq_cronstore_fire_task_id"),
    sa.Index("ix_cronstore_fire_lease", "state", "lease_until"),
    # What the overlap checks and the guard ask of one task ("is a fire of it in flight?"),
    # answered from a few index entries however long its history (migration 0004).
    sa.Index("ix_cronstore_fire_task_state", "periodic_task_id", "state", "fire_time"),
)

beat = sa.Table(
    "cronstore_beat",
    metadata,
    sa.Column("node", sa.String(200), primary_key=True),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("last_tick", UTCDateTime, nullable=False),
    # Since when this beat has had due fires it could neither claim nor publish.
    sa.Column("stalled_since", UTCDateTime, nullable=True),
    # This beat's clock minus the database's (seconds) at its last heartbeat.
    sa.Column("clock_offset", sa.Float, nullable=True),
    # False: started with firing off (CRONSTORE_FIRE=0); true or NULL: it fires (0008).
    sa.Column("firing", sa.Boolean, nullable=True),
)

#: One alert episode of a task, from open to resolved, with its delivery (migration 0007).
alert = sa.Table(
    "cronstore_alert",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column(
        "periodic_task_id",
        _BigId,
        sa.ForeignKey("cronstore_periodic_task.id", ondelete="CASCADE"),
        nullable=False,
    ),
    # "failing" (bad ends in a row) or "silent" (no success for alert_after).
    sa.Column("kind", sa.String(16), nullable=False),
    # "<task id>:<kind>" while open, NULL once resolved: one open episode per task and kind.
    sa.Column("open_key", sa.String(64), nullable=True),
    sa.Column("opened_at", UTCDateTime, nullable=False),
    sa.Column("resolved_at", UTCDateTime, nullable=True),
    sa.Column("reason", sa.Text, nullable=True),
    sa.Column("count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("sent_at", UTCDateTime, nullable=True),
    sa.Column("resolve_sent_at", UTCDateTime, nullable=True),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", UTCDateTime, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.UniqueConstraint("open_key", name="uq_cronstore_alert_open"),
    sa.Index("ix_cronstore_alert_task", "periodic_task_id", "opened_at"),
    sa.Index("ix_cronstore_alert_due", "next_attempt_at"),
)

#: Who changed what, from which window, when (migration 0007).
#: Exclusion calendars (``policy.exclusions``; migration 0013): days, spans and windows
#: (a JSON list of entries) and a country's or region's public holidays.
calendar = sa.Table(
    "cronstore_calendar",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("entries", sa.Text, nullable=False, server_default="[]"),
    sa.Column("holidays", sa.String(16), nullable=True),
    sa.Column("description", sa.Text, nullable=False, server_default=""),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("name", name="uq_cronstore_calendar_name"),
)

audit = sa.Table(
    "cronstore_audit",
    metadata,
    sa.Column("id", _BigId, primary_key=True, autoincrement=True),
    sa.Column("at", UTCDateTime, nullable=False),
    sa.Column("actor", sa.String(200), nullable=False),
    # "cli", "web", "admin", "api", "import", "apply".
    sa.Column("window", sa.String(16), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("task_name", sa.String(200), nullable=False),
    sa.Column("detail", sa.Text, nullable=True),
    sa.Index("ix_cronstore_audit_at", "at"),
    sa.Index("ix_cronstore_audit_task", "task_name", "at"),
)
