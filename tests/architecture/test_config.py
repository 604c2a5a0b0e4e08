"""Settings: every ``cronstore_*`` key is read, typed, and refused with its name when bad."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from celery_cronstore.config import Config


def app_with(**conf: Any) -> Celery:
    app = Celery("config-test", set_as_current=False)
    app.conf.update(conf)
    return app


def test_defaults_need_no_settings() -> None:
    config = Config.from_app(app_with())
    assert config == Config()
    assert config.is_sqlite


def test_values_are_read_and_coerced() -> None:
    config = Config.from_app(
        app_with(
            cronstore_url="postgresql+psycopg://db/app",
            cronstore_poll_interval=2,
            cronstore_batch_size=50,
            cronstore_tolerance=0,
            cronstore_task_allowlist=["mail.", "reports.*"],
        )
    )
    assert (config.poll_interval, config.batch_size, config.tolerance) == (2.0, 50, 0.0)
    assert config.task_allowlist == ("mail.", "reports.*")
    assert not config.is_sqlite


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cronstore_poll_interval", 0, "cronstore_poll_interval must be positive, got 0"),
        ("cronstore_lease", -1.0, "cronstore_lease must be positive"),
        ("cronstore_tolerance", -5, "cronstore_tolerance must be zero or more, got -5"),
        ("cronstore_batch_size", 0, "cronstore_batch_size must be a positive integer"),
        ("cronstore_batch_size", True, "cronstore_batch_size must be a positive integer"),
        ("cronstore_url", "", "cronstore_url must be a non-empty string"),
        ("cronstore_task_allowlist", "mail.", "cronstore_task_allowlist must be a list of strings"),
        (
            "cronstore_auto_migrate_sqlite",
            "yes",
            "cronstore_auto_migrate_sqlite must be True or False",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_key(key: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("*", r"\*")):
        Config.from_app(app_with(**{key: value}))


# -- the kill switch (issue 25): CRONSTORE_FIRE wins over cronstore_fire ------------------


@pytest.mark.parametrize(
    ("env", "setting", "fires"),
    [
        (None, None, True),
        (None, False, False),
        ("0", None, False),
        ("0", True, False),
        ("off", True, False),
        (" No ", True, False),
        ("1", False, True),
        ("TRUE", False, True),
        ("", False, False),  # set but empty: as if unset
    ],
)
def test_cronstore_fire_from_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch, env: str | None, setting: bool | None, fires: bool
) -> None:
    if env is None:
        monkeypatch.delenv("CRONSTORE_FIRE", raising=False)
    else:
        monkeypatch.setenv("CRONSTORE_FIRE", env)
    conf = {} if setting is None else {"cronstore_fire": setting}
    assert Config.from_app(app_with(**conf)).fire is fires


def test_a_bad_cronstore_fire_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRONSTORE_FIRE", "maybe")
    with pytest.raises(ValueError, match=r"CRONSTORE_FIRE must be 0 .* or 1 .*got 'maybe'"):
        Config.from_app(app_with())
    monkeypatch.delenv("CRONSTORE_FIRE")
    with pytest.raises(ValueError, match="cronstore_fire must be True or False, got 'no'"):
        Config.from_app(app_with(cronstore_fire="no"))
