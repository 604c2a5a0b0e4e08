"""Every ``cronstore_*`` setting, read once from a Celery app into one typed object."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery_cronstore.policy.alerts import check_alert_settings

__all__ = ["FIRE_VARIABLE", "Config", "fire_switch"]

_DEFAULT_URL = "sqlite:///celerybeat-cronstore.sqlite"
#: The choices of ``cronstore_pooler`` (``store.pooler.POOLERS``, without importing it).
POOLERS = ("auto", "none", "session", "transaction")


@dataclass(frozen=True)
class Config:
    """celery-cronstore's settings (each is ``app.conf.cronstore_<name>``).

    Each field's ``metadata["help"]`` says what it does; ``docs/generate.py`` builds the
    settings table of ``docs/configuration.md`` from it.
    """

    url: str = field(
        default=_DEFAULT_URL,
        metadata={
            "help": "SQLAlchemy URL of the store. Default: a SQLite file in the working directory."
        },
    )
    engine_options: dict[str, Any] = field(
        default_factory=dict,
        metadata={"help": "Extra keyword arguments for ``sqlalchemy.create_engine``."},
    )
    poll_interval: float = field(
        default=5.0,
        metadata={
            "help": "Longest beat sleeps between two looks at the database (seconds): edits made by"
            " raw SQL, disables and removals are seen within this time."
        },
    )
    lease: float = field(
        default=30.0,
        metadata={
            "help": "How long a claim may stay unpublished before another beat re-publishes it"
            " (seconds)."
        },
    )
    batch_size: int = field(
        default=500, metadata={"help": "Most due rows claimed in one transaction."}
    )
    claim_ahead: float = field(
        default=0.1,
        metadata={
            "help": "Beat claims a fire up to this many seconds before its time and publishes it"
            " at that time exactly, so the claim's transaction does not make it late; sooner"
            " before a burst larger than a batch (at most 10 s or a quarter of the lease)."
            " ``0``: claim each fire when it is due."
        },
    )
    fire: bool = field(
        default=True,
        metadata={
            "help": "``False``: beat claims and publishes nothing (it keeps its heartbeat, so"
            " ``cronstore health`` and the dashboard say firing is off), and run-now is"
            " refused: for a staging copy of a production store. The environment variable"
            " ``CRONSTORE_FIRE`` (``0``/``1``), when set, wins over this setting."
        },
    )
    fast_path: bool = field(
        default=True,
        metadata={
            "help": "Redis: send a task row's fires from a message built once per row and"
            " publish batch (kombu's own envelope, each fire's id, times and expiry filled"
            " in). ``False``: every fire through kombu's producer."
        },
    )
    auto_migrate_sqlite: bool = field(
        default=True,
        metadata={
            "help": "Create the schema at beat start when the store is SQLite (the embedded"
            " default)."
        },
    )
    sync_beat_schedule: bool = field(
        default=True,
        metadata={
            "help": "Sync ``beat_schedule`` entries into the store at beat start (removing stale"
            " ones)."
        },
    )
    tolerance: float = field(
        default=5.0,
        metadata={
            "help": "CronTask: slack (seconds) allowed before ``last_run + interval`` (early-drop"
            " rule)."
        },
    )
    task_allowlist: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "Task names (or prefixes ending in ``.`` or ``*``) beat may send; empty: any."
        },
    )
    require_registered: bool = field(
        default=True,
        metadata={
            "help": "Beat sends only tasks registered in its app (as a worker would import them); a"
            " row naming another task is put in error. ``False``: send any name"
            " (``send_task``), e.g. when the tasks live only in another service's workers."
        },
    )
    misfire_grace: float = field(
        default=30.0,
        metadata={
            "help": "Lateness (seconds) under which a fire counts as on time for the ``skip``"
            " policy."
        },
    )
    start_timeout: float = field(
        default=300.0,
        metadata={
            "help": "CronTask fires only: seconds a published fire may wait for its run to start"
            " before beat publishes it again under the same task id (a message the broker"
            " lost; the guard starts one copy at most). At most 3 times per fire."
        },
    )
    metrics_port: int = field(
        default=0,
        metadata={
            "help": "Serve beat's Prometheus metrics on this port (``/metrics``, on"
            " ``cronstore_metrics_address``; needs the ``metrics`` extra). ``0`` or unset:"
            " off."
        },
    )
    metrics_max_tasks: int = field(
        default=500,
        metadata={
            "help": "Most periodic tasks with ``/metrics`` series of their own (per-task health"
            " and outcome counts on the dashboard, per-task fire counters in beat); the rest"
            ' are summed under the label ``task=""``, so a million tasks cost one series.'
        },
    )
    metrics_address: str = field(
        default="127.0.0.1",
        metadata={"help": "Address beat's metrics listen on (``0.0.0.0``: every interface)."},
    )
    metrics_per_task: bool = field(
        default=False,
        metadata={
            "help": "Label beat's fire counters with the task name too (one series per task"
            " and outcome: for a few hundred tasks, not a million)."
        },
    )
    default_tz: str = field(
        default="",
        metadata={
            "help": "Time zone of tasks added or edited without one (API, CLI, dashboard)."
            " Default: the app's ``timezone`` (UTC when unset), the zone ``beat_schedule``"
            " entries use, so ``0 9 * * *`` means the same time either way."
        },
    )
    watch_plain_tasks: bool = field(
        default=True,
        metadata={
            "help": "Watch the start of plain (non-CronTask) fires too: workers record it when"
            " their app sets ``cronstore_url``. One not started ``cronstore_start_timeout``"
            " after its publish is published again if its task acknowledges late"
            " (``acks_late``: it may run twice), else recorded ``lost``. ``False`` when"
            " workers cannot reach the store (their fires would all look lost)."
        },
    )
    abandon_after: float = field(
        default=120.0,
        metadata={
            "help": "Seconds a started fire's worker may stay silent before the fire is recorded"
            " ``abandoned`` (the worker died or lost the database); it then no longer blocks"
            " overlap policy ``skip``. Workers heartbeat their running fires every quarter of"
            " it."
        },
    )
    history_days: float = field(
        default=30.0,
        metadata={
            "help": "Days of fire history kept in the ledger; beat prunes older rows in small"
            " batches (``cronstore prune`` does it by hand). Never pruned: fires in flight,"
            " each task's newest fire, and the rows the CronTask guard still reads. ``0``"
            " keeps the history forever."
        },
    )

    listen: bool = field(
        default=True,
        metadata={
            "help": "PostgreSQL: beat LISTENs for edits (migration 0005's triggers NOTIFY) and"
            " wakes as soon as a task falls due sooner, instead of at its next poll. SQLite and"
            " MariaDB always poll (``cronstore_poll_interval``). ``False``: poll on PostgreSQL"
            " too."
        },
    )
    pooler: str = field(
        default="auto",
        metadata={
            "help": "PostgreSQL: what sits between the store and the server. ``auto``: the first"
            " connection finds out (a connection pooler that hands one client's server session"
            " to another is a transaction pooler); ``none``: direct; ``session``: a session"
            " pooler (PgBouncer ``pool_mode = session``), as direct; ``transaction``: a"
            " transaction pooler (PgBouncer ``pool_mode = transaction``): the server limits"
            " are set per transaction, prepared statements are off, and LISTEN needs"
            " ``cronstore_listen_url``. Set it when a busy pooler could hide itself."
        },
    )
    listen_url: str = field(
        default="",
        repr=False,  # may carry a password
        metadata={
            "help": "PostgreSQL: a URL of the same database for beat's LISTEN connection alone,"
            " when ``cronstore_url`` goes through a transaction pooler (a direct one, or"
            " through a session pooler). Unset: LISTEN uses ``cronstore_url``, and through"
            " a transaction pooler beat polls every ``cronstore_poll_interval`` instead."
        },
    )

    alert_failures: int = field(
        default=3,
        metadata={
            "help": "Alerts: a task whose fires end badly (failed, timed out, abandoned, lost,"
            " dropped, expired, missed) this many times in a row opens a ``failing`` episode"
            " (docs/alerts.md). ``1``: the first bad end does."
        },
    )
    alert_after: str | None = field(
        default=None,
        metadata={
            "help": "Alerts: the dead man's switch of tasks without their own ``alert_after``:"
            " ``N periods`` of the task's timer (``3 periods``) or a duration (``6h``) with no"
            " success opens a ``silent`` episode. Unset: no switch but the tasks' own."
        },
    )
    alert_webhook: str = field(
        default="",
        repr=False,  # such URLs often carry a token
        metadata={
            "help": "Alerts: beat POSTs each episode's open and resolve to this URL as JSON"
            " (retried with back-off until it answers 2xx). Unset: episodes are only listed"
            " (``cronstore alerts``)."
        },
    )
    alert_secret: str = field(
        default="",
        repr=False,
        metadata={
            "help": "Alerts: key of the ``X-Cronstore-Signature`` header, an HMAC-SHA256 of the"
            " webhook's body (``sha256=<hex>``). Unset: deliveries are not signed."
        },
    )
    alert_timeout: float = field(
        default=5.0,
        metadata={
            "help": "Alerts: seconds the webhook may take to answer; slower counts as failed"
            " and is tried again."
        },
    )
    alert_interval: float = field(
        default=10.0,
        metadata={
            "help": "Alerts: seconds between two looks at the tasks' fires (on a thread of"
            " beat's own: one read of the tasks with an open episode, a bad end or a switch;"
            " of every enabled task when ``cronstore_alert_after`` is set), and between"
            " Sentry check-ins. ``0``: beat"
            " neither evaluates nor delivers alerts."
        },
    )
    alert_pings: dict[str, str] = field(
        default_factory=dict,
        repr=False,  # a ping URL's path is its secret
        metadata={
            "help": "Alerts: ping URLs (healthchecks.io, Cronitor, Better Stack heartbeats) by"
            ' task name or shell-style pattern (``{"billing-*": "https://hc-ping.com/<uuid>"}``;'
            " the task's own name wins, then the first matching pattern): each pass, beat GETs"
            " ``<url>/start``, ``<url>`` or ``<url>/fail`` as the task's newest fire starts,"
            " succeeds or ends badly, with ``?rid=<fire task id>``."
        },
    )

    @classmethod
    def from_app(cls, app: Any) -> Config:
        """Read the ``cronstore_*`` keys of ``app.conf``; raise ``ValueError`` naming a bad one."""
        conf = app.conf
        values: dict[str, Any] = {}
        for name, default in cls.__dataclass_fields__.items():
            key = f"cronstore_{name}"
            value = conf.get(key)
            if value is None:
                continue
            want = type(getattr(cls(), name)) if default.default_factory is not None else None
            want = want or type(default.default)
            # A setting whose default is None (unset) takes text.
            values[name] = _coerce(key, value, str if want is type(None) else want)
        check_alert_settings(values)
        _check_pooler(values)
        switch = fire_switch(os.environ.get(FIRE_VARIABLE))
        if switch is not None:
            values["fire"] = switch
        return cls(**values)

    @property
    def history(self) -> timedelta | None:
        """How long the ledger keeps fire history (``None``: forever)."""
        return None if self.history_days == 0 else timedelta(days=self.history_days)

    def zone(self, app: Any) -> str:
        """Return the zone for tasks given without one: this setting, else ``app``'s."""
        return self.default_tz or str(app.conf.timezone or "UTC")

    @property
    def is_sqlite(self) -> bool:
        """Whether the store is a SQLite database."""
        return self.url.startswith("sqlite")


#: The environment variable that turns beat's firing off (``0``) or on (``1``).
FIRE_VARIABLE = "CRONSTORE_FIRE"
_SWITCH = {
    "0": False, "false": False, "no": False, "off": False,
    "1": True, "true": True, "yes": True, "on": True,
}  # fmt: skip


def fire_switch(text: str | None) -> bool | None:
    """Return what ``CRONSTORE_FIRE``'s value ``text`` says (``None``: unset or empty);
    raise ``ValueError`` naming the variable and the values it takes."""
    if text is None or not text.strip():
        return None
    value = _SWITCH.get(text.strip().lower())
    if value is None:
        raise ValueError(
            f"{FIRE_VARIABLE} must be 0 (beat claims and publishes nothing) or 1 (beat fires),"
            f" also false/true, no/yes, off/on; got {text!r}"
        )
    return value


def _check_pooler(values: dict[str, Any]) -> None:
    """Refuse a ``cronstore_pooler`` that is not one of its choices; hand one that is not
    ``auto`` to the engine (with ``cronstore_engine_options``, which reach it too)."""
    pooler = values.get("pooler", "auto")
    if pooler not in POOLERS:
        raise ValueError(f"cronstore_pooler must be one of {', '.join(POOLERS)}, got {pooler!r}")
    if pooler != "auto":
        values["engine_options"] = {**values.get("engine_options", {}), "pooler": pooler}


#: Number settings for which zero means something (no slack; keep history forever; claim
#: when due; no alerts).
_ZERO_ALLOWED = (
    "cronstore_tolerance",
    "cronstore_history_days",
    "cronstore_claim_ahead",
    "cronstore_alert_interval",
)
#: Whole-number settings for which zero means "off", and their upper bound.
_INT_ZERO_OFF = {"cronstore_metrics_port": 65535}


def _coerce(key: str, value: Any, want: type) -> Any:
    if want is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0 or (value == 0 and key not in _ZERO_ALLOWED):
            want_text = "zero or more" if key in _ZERO_ALLOWED else "positive"
            raise ValueError(f"{key} must be {want_text}, got {value!r}")
        return float(value)
    if want is int and key in _INT_ZERO_OFF:
        top = _INT_ZERO_OFF[key]
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= top:
            return value
        raise ValueError(f"{key} must be a whole number from 0 (off) to {top}, got {value!r}")
    if want is int and isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if want is bool and isinstance(value, bool):
        return value
    if want is str and isinstance(value, str) and value:
        return value
    if want is dict and isinstance(value, dict):
        return dict(value)
    if (
        want is tuple
        and isinstance(value, (list, tuple))
        and all(isinstance(v, str) for v in value)
    ):
        return tuple(value)
    raise ValueError(f"{key} must be {_KIND_TEXT.get(want, want.__name__)}, got {value!r}")


_KIND_TEXT = {
    float: "a number",
    int: "a positive integer",
    bool: "True or False",
    str: "a non-empty string",
    dict: "a dict",
    tuple: "a list of strings",
}
