"""The Flask extension with real Flask apps, Flask-SQLAlchemy and a real store.

The app's table and the store share one database (SQLite, PostgreSQL, MariaDB), each
through its own engine, as in a real deployment; deletes go through HTTP requests.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from celery import Celery
from flask import Flask, abort
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import Mapped, mapped_column

from celery_cronstore.contrib import sweep_orphans
from celery_cronstore.contrib.flask import CronStore, owner_of
from celery_cronstore.errors import StoreUnavailableError
from celery_cronstore.store import DEFAULT_URL, Store

db = SQLAlchemy()


class MailChannel(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "flask_mail_channel"
    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(sa.String(50))


def make_app(db_url: str, cronstore: CronStore, **config: Any) -> Flask:
    """A small app: create a channel with a polling task, delete it, fail a delete."""
    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI=db_url, CRONSTORE_URL=db_url, TESTING=True, **config)
    db.init_app(app)
    cronstore.init_app(app)

    @app.post("/channels/<int:pk>")
    def create(pk: int) -> dict[str, Any]:
        channel = MailChannel(id=pk, name=f"channel {pk}")
        db.session.add(channel)
        db.session.commit()
        task = cronstore.store.add(
            f"poll-{pk}", task="mail.poll", timer="*:0/5", owner=owner_of(channel)
        )
        return {"task": task.name, "owner": list(task.owner or ())}

    @app.delete("/channels/<int:pk>")
    def delete(pk: int) -> dict[str, Any]:
        db.session.delete(db.get_or_404(MailChannel, pk))
        db.session.commit()
        return {"deleted": pk}

    @app.delete("/channels/<int:pk>/failing")
    def delete_then_fail(pk: int) -> dict[str, Any]:
        db.session.delete(db.get_or_404(MailChannel, pk))
        db.session.flush()  # the DELETE ran; the request then fails before the commit
        abort(409)

    return app


@pytest.fixture
def cronstore() -> Iterator[CronStore]:
    ext = CronStore()
    yield ext
    ext.close()


@pytest.fixture
def app(db_url: str, cronstore: CronStore) -> Iterator[Flask]:
    app = make_app(db_url, cronstore)
    with app.app_context():
        db.create_all()
    yield app
    with app.app_context():
        db.drop_all()
        db.engine.dispose()


@pytest.fixture
def tie(cronstore: CronStore) -> Iterator[Callable[..., Callable[[], None]]]:
    unties: list[Callable[[], None]] = []

    def make(**kwargs: Any) -> Callable[[], None]:
        kwargs.setdefault("owner_type", "mail_channel")
        untie = cronstore.tie_owner(MailChannel, **kwargs)
        unties.append(untie)
        return untie

    yield make
    for untie in unties:
        untie()


def names(store: Store) -> list[str]:
    return [t.name for t in store.list()]


# -- owner ties through requests ------------------------------------------------------------


def test_request_that_deletes_an_owner_removes_its_tasks(
    app: Flask, cronstore: CronStore, tie: Callable[..., Any]
) -> None:
    tie()
    client = app.test_client()
    assert client.post("/channels/1").json == {"task": "poll-1", "owner": ["mail_channel", "1"]}
    assert client.post("/channels/2").status_code == 200
    store = cronstore.store_for(app)
    store.add("housekeeping", task="clean", timer="daily")
    assert client.delete("/channels/1").status_code == 200
    assert names(store) == ["housekeeping", "poll-2"]
    assert store.engine.pool.checkedout() == 0


def test_failed_request_releases_nothing(
    app: Flask, cronstore: CronStore, tie: Callable[..., Any]
) -> None:
    tie()
    client = app.test_client()
    client.post("/channels/1")
    assert client.delete("/channels/1/failing").status_code == 409
    client.post("/channels/2")  # a later commit must not release the rolled-back owner
    with app.app_context():
        assert db.session.get(MailChannel, 1) is not None
    assert names(cronstore.store_for(app)) == ["poll-1", "poll-2"]


def test_on_delete_disable_and_default_owner_type(
    app: Flask, cronstore: CronStore, tie: Callable[..., Any]
) -> None:
    tie(owner_type=None, on_delete="disable")  # the owner type defaults to the table name
    client = app.test_client()
    assert client.post("/channels/3").json == {
        "task": "poll-3",
        "owner": ["flask_mail_channel", "3"],
    }
    client.delete("/channels/3")
    task = cronstore.store_for(app).get("poll-3")
    assert (task.enabled, task.next_run) == (False, None)


def test_store_failure_is_logged_and_swept(
    app: Flask,
    db_url: str,
    cronstore: CronStore,
    tie: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    tie()
    client = app.test_client()
    client.post("/channels/1")
    client.post("/channels/2")
    # The store becomes unreachable: it reopens from the config at its next use.
    cronstore.close(app)
    app.config["CRONSTORE_URL"] = "mysql+pymysql://root@127.0.0.1:1/x"
    with caplog.at_level(logging.ERROR, logger="celery_cronstore.contrib"):
        assert client.delete("/channels/1").status_code == 200  # the delete still succeeds
    assert "run sweep_orphans() later" in caplog.text
    cronstore.close(app)
    app.config["CRONSTORE_URL"] = db_url
    with app.app_context():
        assert names(cronstore.store) == ["poll-1", "poll-2"]
        live = db.session.scalars(sa.select(MailChannel.id)).all()
        assert sweep_orphans(cronstore.store, "mail_channel", live) == 1
        assert names(cronstore.store) == ["poll-2"]


# -- one store per application --------------------------------------------------------------


def test_store_lives_with_the_app_not_the_request(app: Flask, cronstore: CronStore) -> None:
    with app.app_context():
        first = cronstore.store
    with app.test_request_context("/"):
        assert cronstore.store is first
    assert app.extensions["cronstore"] is cronstore
    cronstore.close(app)
    cronstore.close(app)  # twice is harmless
    assert cronstore.store_for(app) is not first, "reopened after close"


def test_each_app_gets_its_own_store_and_ties_follow_the_active_app(
    tmp_path: Path, cronstore: CronStore, tie: Callable[..., Any]
) -> None:
    apps = []
    for label in ("a", "b"):
        url = f"sqlite:///{tmp_path / f'{label}.sqlite'}"
        Store(url).upgrade()
        apps.append(make_app(url, cronstore))
    tie()
    for app in apps:
        with app.app_context():
            db.create_all()
        app.test_client().post("/channels/1")
    apps[0].test_client().delete("/channels/1")
    assert names(cronstore.store_for(apps[0])) == []
    assert names(cronstore.store_for(apps[1])) == ["poll-1"]
    for app in apps:
        with app.app_context():
            db.engine.dispose()


def test_store_is_opened_lazily() -> None:
    app = Flask(__name__)
    # Opening a MySQL store probes the server; port 1 refuses at once.
    app.config["CRONSTORE_URL"] = "mysql+pymysql://root:hunter2@127.0.0.1:1/x"
    ext = CronStore(app)  # nothing is opened here
    with pytest.raises(StoreUnavailableError):
        ext.store_for(app)


def test_bound_app_serves_outside_a_context_unbound_needs_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.sqlite'}"
    app = Flask(__name__)
    bound = CronStore(app, url=url)
    assert bound.store.url == url
    unbound = CronStore(url=url)
    unbound.init_app(Flask(__name__))
    with pytest.raises(RuntimeError, match=r"inside `with app.app_context\(\):`"):
        _ = unbound.store
    with pytest.raises(RuntimeError, match="already registered on app"):
        unbound.init_app(app)
    with pytest.raises(RuntimeError, match="not registered on app 'other'; call init_app"):
        unbound.store_for(Flask("other"))
    bound.close()
    unbound.close()


# -- where the URL comes from -----------------------------------------------------------------


def celery_app(**conf: Any) -> Celery:
    celery = Celery("t", set_as_current=False)
    celery.conf.update(conf)
    return celery


CELERY = {
    "cronstore_url": "sqlite:///from-celery.sqlite",
    "cronstore_engine_options": {"pool_size": 3, "echo": False},
}


@pytest.mark.parametrize(
    ("config", "kwargs", "celery_in_extensions", "expected"),
    [
        pytest.param({}, {}, False, (DEFAULT_URL, {}), id="default"),
        pytest.param(
            {},
            {"celery": celery_app(**CELERY)},
            False,
            ("sqlite:///from-celery.sqlite", {"pool_size": 3, "echo": False}),
            id="celery-argument",
        ),
        pytest.param(
            {},
            {},
            True,
            ("sqlite:///from-celery.sqlite", {"pool_size": 3, "echo": False}),
            id="celery-in-extensions",
        ),
        pytest.param(
            {},
            {"url": "sqlite:///arg.sqlite", "celery": celery_app(**CELERY)},
            False,
            ("sqlite:///arg.sqlite", {}),
            id="url-argument-over-celery",
        ),
        pytest.param(
            {
                "CRONSTORE_URL": "sqlite:///config.sqlite",
                "CRONSTORE_ENGINE_OPTIONS": {"echo": True},
            },
            {"url": "sqlite:///arg.sqlite", "engine_options": {"echo": False, "pool_size": 2}},
            True,
            ("sqlite:///config.sqlite", {"echo": True, "pool_size": 2}),
            id="config-over-everything",
        ),
    ],
)
def test_url_resolution_order(
    config: dict[str, Any],
    kwargs: dict[str, Any],
    celery_in_extensions: bool,
    expected: tuple[str, dict[str, Any]],
) -> None:
    app = Flask(__name__)
    app.config.update(config)
    if celery_in_extensions:
        app.extensions["celery"] = celery_app(**CELERY)
    ext = CronStore(app, **kwargs)
    assert ext.settings_for(app) == expected


def test_bad_settings_are_named() -> None:
    with pytest.raises(ValueError, match="url must be a non-empty string, got ''"):
        CronStore(url="")
    app = Flask(__name__)
    ext = CronStore(app)
    app.config["CRONSTORE_URL"] = 42
    with pytest.raises(ValueError, match="CRONSTORE_URL must be a non-empty string, got 42"):
        ext.store_for(app)
    app.config["CRONSTORE_URL"] = "sqlite://"
    app.config["CRONSTORE_ENGINE_OPTIONS"] = "echo=True"
    with pytest.raises(ValueError, match="CRONSTORE_ENGINE_OPTIONS must be a dict, got str"):
        ext.store_for(app)
    celery = celery_app(cronstore_url=5)
    with pytest.raises(ValueError, match="cronstore_url must be a non-empty string, got 5"):
        _ = CronStore(Flask(__name__), celery=celery).store
    with pytest.raises(TypeError, match="is not a mapped SQLAlchemy class with a table"):
        ext.tie_owner(int)


# -- flask cronstore migrate ------------------------------------------------------------------


def test_cli_migrate_creates_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.sqlite'}"
    app = Flask(__name__)
    app.config["CRONSTORE_URL"] = url
    ext = CronStore(app)
    result = app.test_cli_runner().invoke(args=["cronstore", "migrate"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{url}: schema at revision ")
    ext.store.check_schema()  # raises unless the tables are at the head revision
    ext.store.add("poll-1", task="mail.poll", timer="*:0/5")
    ext.close()


def test_cli_migrate_failure_is_one_line_without_the_password() -> None:
    app = Flask(__name__)
    app.config["CRONSTORE_URL"] = "mysql+pymysql://root:hunter2@127.0.0.1:1/x"
    CronStore(app)
    result = app.test_cli_runner().invoke(args=["cronstore", "migrate"])
    assert result.exit_code == 1
    assert result.output.startswith("Error: StoreUnavailableError: the cronstore database ")
    assert len(result.output.strip().splitlines()) == 1
    assert "hunter2" not in result.output
    assert "Traceback" not in result.output
