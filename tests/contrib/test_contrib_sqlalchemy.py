"""Owner ties for SQLAlchemy ORM apps, with the app's tables in a real database.

The application's tables live in the same database as the store (SQLite, PostgreSQL,
MariaDB), but the app uses its own engine and sessions, as a real application would.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from celery_cronstore.contrib import release_owner, sweep_orphans
from celery_cronstore.contrib.sqlalchemy import owner_of, tie_owner
from celery_cronstore.store import Store


class Base(DeclarativeBase):
    pass


class MailChannel(Base):
    __tablename__ = "app_mail_channel"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(sa.String(50))


class Mailbox(Base):
    """A second owner model with a composite key (needs ``id_of``)."""

    __tablename__ = "app_mailbox"
    domain: Mapped[str] = mapped_column(sa.String(50), primary_key=True)
    user: Mapped[str] = mapped_column(sa.String(50), primary_key=True)


@pytest.fixture
def app_engine(db_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(db_url)
    Base.metadata.create_all(engine)
    yield engine
    Base.metadata.drop_all(engine)
    engine.dispose()


@pytest.fixture
def tie(store: Store) -> Iterator[Callable[..., Callable[[], None]]]:
    unties: list[Callable[[], None]] = []

    def make(model: type[Any] = MailChannel, **kwargs: Any) -> Callable[[], None]:
        kwargs.setdefault("owner_type", "mail_channel")
        kwargs.setdefault("store", store)
        untie = tie_owner(model, **kwargs)
        unties.append(untie)
        return untie

    yield make
    for untie in unties:
        untie()


def add_channels(engine: sa.Engine, *ids: int) -> None:
    with Session(engine) as session, session.begin():
        session.add_all(MailChannel(id=i, name=f"channel {i}") for i in ids)


def schedule(store: Store, *ids: int) -> None:
    """Give each channel two tasks, and add one task of another owner type and one unowned."""
    for i in ids:
        store.add(f"poll-{i}", task="mail.poll", timer="*:0/5", owner=("mail_channel", i))
        store.add(f"purge-{i}", task="mail.purge", timer="daily", owner=("mail_channel", i))
    store.add("report-7", task="report", timer="hourly", owner=("user", 7))
    store.add("housekeeping", task="clean", timer="daily")


def names(store: Store) -> list[str]:
    return [t.name for t in store.list()]


def delete_channel(engine: sa.Engine, channel_id: int) -> None:
    with Session(engine) as session, session.begin():
        session.delete(session.get_one(MailChannel, channel_id))


def test_committed_delete_removes_only_that_owners_tasks(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(app_engine, 1, 2)
    schedule(store, 1, 2)
    delete_channel(app_engine, 1)
    assert names(store) == ["housekeeping", "poll-2", "purge-2", "report-7"]


def test_rolled_back_delete_keeps_the_tasks(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(app_engine, 1)
    schedule(store, 1)
    with Session(app_engine) as session:
        session.delete(session.get_one(MailChannel, 1))
        session.flush()  # the DELETE ran, the mapper event fired
        session.rollback()
        session.add(MailChannel(id=9, name="unrelated"))
        session.commit()  # a later commit must not release the rolled-back owner
    assert "poll-1" in names(store)


def test_closed_session_without_commit_releases_nothing(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(app_engine, 1)
    schedule(store, 1)
    session = Session(app_engine)
    session.delete(session.get_one(MailChannel, 1))
    session.flush()
    session.close()
    session.add(MailChannel(id=9, name="reused session"))
    session.commit()
    session.close()
    assert "poll-1" in names(store)


def test_delete_in_a_rolled_back_savepoint_keeps_the_tasks(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(app_engine, 1, 2)
    schedule(store, 1, 2)
    with Session(app_engine) as session, session.begin():
        savepoint = session.begin_nested()
        session.delete(session.get_one(MailChannel, 1))
        session.flush()
        savepoint.rollback()
        with session.begin_nested():  # released savepoint: its delete counts at commit
            session.delete(session.get_one(MailChannel, 2))
        assert "poll-2" in names(store), "released before the outermost commit"
    assert names(store) == ["housekeeping", "poll-1", "purge-1", "report-7"]


def test_on_delete_disable_keeps_disabled_tasks(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    tie(on_delete="disable")
    add_channels(app_engine, 1, 2)
    schedule(store, 1, 2)
    delete_channel(app_engine, 1)
    enabled = {t.name: t.enabled for t in store.list(owner_type="mail_channel")}
    assert enabled == {"poll-1": False, "purge-1": False, "poll-2": True, "purge-2": True}
    assert store.get("poll-1").next_run is None


def test_owner_of_names_the_tied_type_and_the_primary_key(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(app_engine, 42)
    with Session(app_engine) as session:
        channel = session.get_one(MailChannel, 42)
        assert owner_of(channel) == ("mail_channel", "42")
        assert owner_of(channel, "other") == ("other", "42")
        store.add("poll-42", task="mail.poll", timer="*:0/5", owner=owner_of(channel))
    with pytest.raises(ValueError, match="no primary key yet"):
        owner_of(MailChannel(name="unsaved"))
    with pytest.raises(LookupError, match="Mailbox is not tied"):
        owner_of(Mailbox(domain="example.org", user="ann"))


def test_store_source_may_be_a_function_called_at_the_first_release(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    calls: list[int] = []

    def lazy() -> Store:
        calls.append(1)
        return store

    tie(store=lazy)
    add_channels(app_engine, 1)
    schedule(store, 1)
    assert calls == []
    delete_channel(app_engine, 1)
    assert calls == [1]
    assert "poll-1" not in names(store)


def test_composite_keys_need_id_of(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    with pytest.raises(ValueError, match="composite primary key; pass id_of"):
        tie(Mailbox, owner_type="mailbox")
    tie(Mailbox, owner_type="mailbox", id_of=lambda box: f"{box.user}@{box.domain}")
    with Session(app_engine) as session, session.begin():
        session.add(Mailbox(domain="example.org", user="ann"))
    store.add("fetch-ann", task="mail.fetch", timer="hourly", owner=("mailbox", "ann@example.org"))
    with Session(app_engine) as session, session.begin():
        box = session.get_one(Mailbox, ("example.org", "ann"))
        assert owner_of(box) == ("mailbox", "ann@example.org")
        session.delete(box)
    assert store.list(owner_type="mailbox") == []


def test_bad_arguments_are_refused(tie: Callable[..., Any]) -> None:
    tie()
    with pytest.raises(ValueError, match="already tied to owner type 'mail_channel'"):
        tie()
    with pytest.raises(ValueError, match="on_delete must be 'remove' or 'disable', got 'drop'"):
        tie(Mailbox, owner_type="mailbox", id_of=str, on_delete="drop")
    with pytest.raises(TypeError, match="not a mapped SQLAlchemy class"):
        tie(int)


def test_untie_stops_releasing(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    untie = tie()
    untie()
    add_channels(app_engine, 1)
    schedule(store, 1)
    delete_channel(app_engine, 1)
    assert "poll-1" in names(store)


def test_store_failure_after_commit_is_logged_and_swept_later(
    store: Store,
    app_engine: sa.Engine,
    tie: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> Store:
        raise ConnectionError("store is down")

    tie(store=broken)
    add_channels(app_engine, 1, 2)
    schedule(store, 1, 2)
    with caplog.at_level(logging.ERROR, logger="celery_cronstore.contrib"):
        delete_channel(app_engine, 1)  # the application's delete still succeeds
    assert "run sweep_orphans() later" in caplog.text
    with Session(app_engine) as session:
        assert session.get(MailChannel, 1) is None
        live = session.scalars(sa.select(MailChannel.id)).all()
    assert "poll-1" in names(store)
    assert sweep_orphans(store, "mail_channel", live) == 2
    assert names(store) == ["housekeeping", "poll-2", "purge-2", "report-7"]


def test_bulk_delete_is_not_seen_so_release_by_hand(
    store: Store, app_engine: sa.Engine, tie: Callable[..., Any]
) -> None:
    tie()
    add_channels(app_engine, 1)
    schedule(store, 1)
    with Session(app_engine) as session, session.begin():
        session.execute(sa.delete(MailChannel).where(MailChannel.id == 1))
    assert "poll-1" in names(store), "ORM events do not see bulk DELETE (documented)"
    assert release_owner(store, "mail_channel", 1) == 2
    assert release_owner(store, "mail_channel", 1) == 0
    assert "poll-1" not in names(store)
