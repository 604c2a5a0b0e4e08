"""The store API, run for real on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import sqlalchemy as sa

from celery_cronstore import DuplicateTaskError, TaskNotFoundError, TimerSyntaxError
from celery_cronstore.store import Store
from celery_cronstore.testing import FrozenClock

#: 90 s before midnight UTC (the night Berlin moves to summer time): the next five-minute
#: and ten-second fires are the next day's.
BEFORE_MIDNIGHT = datetime(2026, 3, 28, 23, 58, 30, tzinfo=timezone.utc)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(BEFORE_MIDNIGHT)


def test_add_and_get_round_trip_every_field(store: Store) -> None:
    added = store.add(
        "poll-mailbox-42",
        task="mail.poll",
        timer="*:0/5",
        kind="calendar",
        args=[42],
        kwargs={"full": True},
        options={"queue": "mail", "priority": 3},
        owner=("mail_channel", 42),
        tz="Europe/Berlin",
        description="poll it",
    )
    got = store.get("poll-mailbox-42")
    assert got == added
    assert (got.task, got.args, got.kwargs) == ("mail.poll", [42], {"full": True})
    assert got.options == {"queue": "mail", "priority": 3}
    assert got.owner == ("mail_channel", "42")
    assert (got.timer_kind, got.timer, got.tz) == ("calendar", "*-*-* *:00/5:00", "Europe/Berlin")
    assert got.next_run == datetime(2026, 3, 29, 0, 0, tzinfo=timezone.utc)
    assert got.next_run.tzinfo is timezone.utc
    assert got.created_at == BEFORE_MIDNIGHT
    assert got.enabled
    assert got.source == "api"


def test_kind_is_detected_when_omitted(store: Store) -> None:
    assert store.add("c", task="t", timer="*/5 * * * *").timer_kind == "cron"
    assert store.add("i", task="t", timer="every 30s").timer_kind == "interval"
    assert store.add("k", task="t", timer="Mon..Fri 09:30").timer_kind == "calendar"


def test_bad_timer_fails_before_anything_is_written(store: Store) -> None:
    with pytest.raises(TimerSyntaxError, match="position"):
        store.add("bad", task="t", timer="*-*-* 25:00")
    with pytest.raises(TaskNotFoundError):
        store.get("bad")
    assert store.list() == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("args", "not-a-list", "args must be a list"),
        ("kwargs", [1], "kwargs must be a mapping"),
        ("options", {"queue": "q", "bogus": 1}, "unknown Celery option"),
        ("misfire_policy", "sometimes", "misfire_policy must be one of"),
        ("overlap_policy", "never", "overlap_policy must be one of"),
        ("start_deadline", -1, "start_deadline must be a non-negative"),
        ("args", [object()], "args must be JSON-serializable"),
    ],
)
def test_bad_values_are_refused_with_the_field_named(
    store: Store, field: str, value: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        store.add("x", task="t", timer="hourly", **{field: value})  # type: ignore[arg-type]
    assert store.list() == []


def test_duplicate_name_is_refused(store: Store) -> None:
    store.add("a", task="t", timer="hourly")
    with pytest.raises(DuplicateTaskError, match="'a' already exists"):
        store.add("a", task="u", timer="daily")
    assert store.get("a").task == "t"


def test_list_filters(store: Store) -> None:
    store.add("a", task="mail.poll", timer="hourly", owner=("channel", 1))
    store.add("b", task="mail.poll", timer="hourly", owner=("channel", 2), enabled=False)
    store.add("c", task="report", timer="daily")
    assert [t.name for t in store.list()] == ["a", "b", "c"]
    assert [t.name for t in store.list(owner=("channel", "1"))] == ["a"]
    assert [t.name for t in store.list(enabled=False)] == ["b"]
    assert [t.name for t in store.list(task="mail.poll")] == ["a", "b"]
    assert [t.name for t in store.list(owner_type="channel", enabled=True)] == ["a"]


def test_update_retimes_and_replans(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="daily")
    updated = store.update("a", timer="*:0/15", args=[1])
    assert updated.timer == "*-*-* *:00/15:00"
    assert updated.args == [1]
    assert updated.next_run == datetime(2026, 3, 29, 0, 0, tzinfo=timezone.utc)
    assert updated.version == 2
    with pytest.raises(TimerSyntaxError):
        store.update("a", timer="*:0/99x")
    assert store.get("a").timer == "*-*-* *:00/15:00"
    with pytest.raises(ValueError, match="unknown field"):
        store.update("a", colour="red")


def test_disable_enable(store: Store, clock: FrozenClock) -> None:
    store.add("a", task="t", timer="*:*:0/10")
    assert store.disable("a").enabled is False
    assert store.get("a").next_run is None
    clock.advance(seconds=95)
    enabled = store.enable("a")
    assert enabled.enabled
    assert enabled.next_run == datetime(2026, 3, 29, 0, 0, 10, tzinfo=timezone.utc)


def test_remove_and_owner_ties(store: Store) -> None:
    for i in range(3):
        store.add(f"ch1-{i}", task="t", timer="hourly", owner=("mail_channel", "1"))
    store.add("ch2", task="t", timer="hourly", owner=("mail_channel", "2"))
    store.add("free", task="t", timer="hourly")
    assert store.disable_owned_by("mail_channel", 2) == 1
    assert store.get("ch2").enabled is False
    assert store.remove_owned_by("mail_channel", "1") == 3
    assert [t.name for t in store.list()] == ["ch2", "free"]
    store.remove("free")
    with pytest.raises(TaskNotFoundError, match="no periodic task named 'free'"):
        store.remove("free")


def test_next_runs_in_the_tasks_zone(store: Store) -> None:
    store.add("a", task="t", timer="0 9 * * *", tz="Europe/Berlin")
    runs = store.next_runs("a", 3, after=datetime(2026, 3, 28, 12, tzinfo=timezone.utc))
    # Berlin switches to summer time on 2026-03-29: 09:00 is 08:00 UTC before, 07:00 after.
    assert runs == [
        datetime(2026, 3, 29, 7, tzinfo=timezone.utc),
        datetime(2026, 3, 30, 7, tzinfo=timezone.utc),
        datetime(2026, 3, 31, 7, tzinfo=timezone.utc),
    ]


HOSTILE = [
    "'; DROP TABLE cronstore_periodic_task; --",
    'quote " and \\ backslash',
    "ünïcødé ✓ 日本語 🚀",
    "x" * 200,
]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_are_stored_verbatim(store: Store, text: str) -> None:
    store.add(
        text,
        task=text,
        timer="hourly",
        args=[text],
        kwargs={text: text},
        owner=(text[:100], text),
        description=text,
    )
    got = store.get(text)
    assert (got.name, got.task, got.args, got.kwargs, got.description) == (
        text,
        text,
        [text],
        {text: text},
        text,
    )
    assert got.owner == (text[:100], text)
    assert [t.name for t in store.list(owner=(text[:100], text))] == [text]


def test_too_long_name_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="longer than 200"):
        store.add("x" * 201, task="t", timer="hourly")


def test_schema_is_at_head_and_matches_the_models(store: Store) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from celery_cronstore.store.schema import metadata

    store.check_schema()
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn)
        diff = [
            d
            for d in compare_metadata(context, metadata)
            if not (isinstance(d, tuple) and d[0] == "remove_table")
        ]
    assert diff == []


def test_raw_sql_timer_edit_is_replanned_by_the_trigger(store: Store) -> None:
    store.add("a", task="t", timer="daily")
    with store.begin() as conn:
        conn.execute(
            sa.text("UPDATE cronstore_periodic_task SET timer = :t WHERE name = 'a'"),
            {"t": "*:0/5"},
        )
    from celery_cronstore.store.types import EPOCH

    assert store.get("a").next_run == EPOCH


def test_a_forked_child_opens_its_own_connections(db_url: str) -> None:
    """``celery worker -B`` forks beat after the parent used the store: the child must not
    reuse the parent's pooled connection (SQLite: "locking protocol"; servers: two clients
    on one socket), and the parent's connection must survive the child."""
    import os

    parent = Store(db_url)
    parent.add("before-fork", task="t.x", timer="every 1h")
    with parent.engine.connect() as conn:  # the connection the pool keeps for the parent
        inherited = conn.connection.dbapi_connection
    pid = os.fork()
    if pid == 0:  # the child: use the inherited store, report by exit status only
        code = 1
        try:
            with parent.engine.connect() as conn:
                if conn.connection.dbapi_connection is inherited:
                    os._exit(2)  # reused the parent's connection
            parent.add("in-child", task="t.x", timer="every 2h")
            code = 0 if parent.get("before-fork").task == "t.x" else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [t.name for t in parent.list()] == ["before-fork", "in-child"]
    parent.close()


def test_a_task_can_be_renamed(store: Store) -> None:
    """Regression: ``update("a", name="b")`` raised TypeError (``name`` was taken twice)."""
    store.add("a", task="t", timer="every 1h")
    renamed = store.update("a", name="b")
    assert renamed.name == "b"
    assert [t.name for t in store.list()] == ["b"]


def test_migration_0006_adds_the_abandon_policy_and_drops_it_again(db_url: str) -> None:
    """0006 on every backend: existing rows keep today's behaviour (``leave``, no re-runs),
    the downgrade drops both columns, and the re-plan trigger survives both ways."""
    from celery_cronstore.store import migrate

    store = Store(db_url)

    def columns(table: str) -> set[str]:
        return {c["name"] for c in sa.inspect(store.engine).get_columns(table)}

    try:
        migrate.upgrade(store.engine, "0005", downgrade=True)
        assert "abandon_policy" not in columns("cronstore_periodic_task")
        assert "reruns" not in columns("cronstore_fire")
        with store.begin() as conn:  # a row and a fire written by the previous release
            conn.execute(
                sa.text(
                    "INSERT INTO cronstore_periodic_task (name, task, timer_kind, timer,"
                    " created_at, updated_at) VALUES ('old', 't', 'interval', 'every 1h',"
                    " '2026-01-05 12:00:00', '2026-01-05 12:00:00')"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO cronstore_fire (periodic_task_id, fire_time, task_id, state)"
                    " SELECT id, '2026-01-05 13:00:00', 'old-fire', 'started'"
                    " FROM cronstore_periodic_task WHERE name = 'old'"
                )
            )
        migrate.upgrade(store.engine)
        store.check_schema()
        assert store.get("old").abandon_policy == "leave"
        fire = store.fire_by_task_id("old-fire")
        assert fire is not None
        assert fire.reruns == 0
        store.update("old", abandon_policy="rerun")
        migrate.upgrade(store.engine, "0005", downgrade=True)
        assert "abandon_policy" not in columns("cronstore_periodic_task")
        assert "reruns" not in columns("cronstore_fire")
        with store.begin() as conn:  # the re-plan trigger (0001/0002) is still there
            conn.execute(sa.text("UPDATE cronstore_periodic_task SET timer = 'every 2h'"))
            replanned = conn.execute(
                sa.text("SELECT next_run FROM cronstore_periodic_task WHERE name = 'old'")
            ).scalar_one()
        assert str(replanned).startswith("1970-01-01")
    finally:
        migrate.upgrade(store.engine)
        with store.begin() as conn:
            conn.exec_driver_sql("DELETE FROM cronstore_fire")
            conn.exec_driver_sql("DELETE FROM cronstore_periodic_task")
        store.close()
    store = Store(db_url)
    try:
        store.check_schema()
        store.add("new", task="t", timer="hourly")
        assert store.get("new").abandon_policy == "leave"
    finally:
        store.close()
