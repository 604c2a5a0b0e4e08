"""What a message beat sends may carry, and which tasks it may send: pure tables."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from timeline import T0, at

from celery_cronstore.policy import (
    H_FIRE,
    H_INTERVAL,
    H_NAME,
    MESSAGE_SERIALIZER,
    allowed,
    message_options,
    option_problems,
    send_refusal,
)
from celery_cronstore.records import Claim

CLAIM = Claim(
    periodic_task_id=7,
    name="A",
    task="app.a",
    args=[],
    kwargs={},
    options={"queue": "q"},
    fire_time=T0,
    task_id="54b2da43-8676-5cca-8275-e307d6a77d79",
    attempt=1,
    expires=at(10),
    interval=60.0,
)
OUR_HEADERS = {
    "celery_beat_task": True,
    H_NAME: "A",
    H_FIRE: "2026-01-05T12:00:00+00:00",
    H_INTERVAL: 60.0,
}


def claim(**changes: Any) -> Claim:
    return dataclasses.replace(CLAIM, **changes)


# -- message_options ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "guarded", "expected"),
    [
        # A plain task: the starting deadline travels as Celery's expires; no time box.
        ({}, False, {"queue": "q", "expires": at(10)}),
        ({"expires": None}, False, {"queue": "q"}),
        # A CronTask: no expires (its guard checks the deadline on the database clock),
        # a soft limit of half the interval and a hard one at the next fire.
        ({}, True, {"queue": "q", "soft_time_limit": 30.0, "time_limit": 60.0}),
        # (the hard limit stays at least a second after the soft one)
        (
            {"interval": 1.0, "expires": None},
            True,
            {"queue": "q", "soft_time_limit": 0.5, "time_limit": 1.5},
        ),
        # A row's own soft limit wins; the hard limit still ends the run at the next fire.
        (
            {"options": {"soft_time_limit": 5}},
            True,
            {"soft_time_limit": 5, "time_limit": 60.0},
        ),
        (
            {"options": {"time_limit": 90}},
            True,
            {"soft_time_limit": 30.0, "time_limit": 90},
        ),
        # No next fire: no time box.
        ({"interval": None}, True, {"queue": "q"}),
        ({"interval": None, "expires": None}, False, {"queue": "q"}),
    ],
)
def test_message_options(changes: dict[str, Any], guarded: bool, expected: dict[str, Any]) -> None:
    options = message_options(claim(**changes), guarded=guarded)
    interval = changes.get("interval", 60.0)
    assert options == {
        **expected,
        "headers": {**OUR_HEADERS, H_INTERVAL: interval},
        "serializer": MESSAGE_SERIALIZER,
    }


def test_reserved_headers_are_filtered() -> None:
    headers: dict[Any, Any] = {
        "task": "evil.run",
        "id": "not-the-fire",
        "celery_beat_task": False,
        "cronstore_name": "B",
        "cronstore_anything": 1,
        1: "not a string",
        "trace": "kept",
    }
    original = {"headers": headers, "queue": "q"}
    options = message_options(claim(options=original), guarded=False)
    assert options["headers"] == {**OUR_HEADERS, "trace": "kept"}
    assert original == {"headers": headers, "queue": "q"}, "the claim's options are not changed"


@pytest.mark.parametrize("serializer", [None, "pickle", "yaml", "json"])
def test_json_is_forced(serializer: str | None) -> None:
    options = message_options(claim(options={"serializer": serializer}), guarded=True)
    assert options["serializer"] == "json" == MESSAGE_SERIALIZER


# -- option_problems ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, None),
        ({"queue": "q", "priority": 9, "expires": 30, "retry": True}, None),
        ({"expires": "2026-01-05T12:00:00Z", "soft_time_limit": 1.5}, None),
        ({"retry_policy": {"max_retries": 3, "interval_start": 0}}, None),
        ({"headers": {"trace": "x"}}, None),
        ({"bogus": 1}, "unknown Celery option(s) bogus"),
        ({"queue": ""}, "option queue must be a non-empty string, got ''"),
        ({"priority": True}, "option priority must be an integer 0..255, got True"),
        ({"priority": 256}, "option priority must be an integer 0..255, got 256"),
        ({"time_limit": 0}, "option time_limit must be a positive number of seconds, got 0"),
        ({"time_limit": float("nan")}, "option time_limit must be a positive number"),
        ({"expires": "tomorrow"}, "option expires must be seconds or an ISO-8601 instant"),
        ({"expires": "2026-01-05T12:00:00"}, "option expires must be seconds or an ISO-8601"),
        ({"serializer": "pickle"}, "option serializer 'pickle' is refused"),
        ({"retry": "yes"}, "option retry must be true or false, got 'yes'"),
        ({"retry_policy": {"forever": 1}}, "option retry_policy must be an object with keys"),
        ({"retry_policy": {"max_retries": -1}}, "option retry_policy values must be non-negative"),
        ({"headers": []}, "option headers must be an object, got list"),
        (
            {"headers": {"task": "x", "cronstore_fire_time": "y"}},
            "header(s) cronstore_fire_time, task",
        ),
    ],
)
def test_option_problems(options: dict[str, Any], problem: str | None) -> None:
    problems = option_problems(options)
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1
        assert problem in problems[0]


# -- the allowlist --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "allowlist", "expected"),
    [
        ("anything.at.all", (), True),  # empty: everything
        # exact names
        ("mail.send", ("mail.send",), True),
        ("mail.sender", ("mail.send",), False),
        ("mail.send.later", ("mail.send",), False),
        ("mail", ("mail.send",), False),
        # ``prefix.``: names under the dotted prefix
        ("mail.send", ("mail.",), True),
        ("mail.a.b", ("mail.",), True),
        ("mailer.send", ("mail.",), False),
        ("mail", ("mail.",), False),
        # ``prefix*``: any name that starts so
        ("mail.send", ("mail*",), True),
        ("mailer.send", ("mail*",), True),
        ("mail", ("mail*",), True),
        ("email.send", ("mail*",), False),
        ("x", ("*",), True),
        # a plain entry is never a prefix
        ("mail.send", ("mail",), False),
        # any entry of several
        ("report.daily", ("mail.", "report.daily"), True),
        ("report.weekly", ("mail.", "report.daily"), False),
    ],
)
def test_allowed(name: str, allowlist: tuple[str, ...], expected: bool) -> None:
    assert allowed(name, allowlist) is expected


@pytest.mark.parametrize(
    ("row_problems", "allowlist", "check", "expected"),
    [
        ([], (), None, None),
        ([], ("app.",), None, None),
        (["a", "b"], (), None, "a; b"),
        ([], ("mail.",), None, "task 'app.a' is not in cronstore_task_allowlist"),
        ([], (), "not registered", "not registered"),
        (["bad row"], ("mail.",), "not registered", "bad row"),  # first reason wins
    ],
)
def test_send_refusal(
    row_problems: list[str], allowlist: tuple[str, ...], check: str | None, expected: str | None
) -> None:
    def task_check(name: str) -> str | None:
        assert name == "app.a"
        return check

    assert send_refusal("app.a", row_problems, allowlist, task_check) == expected
    if check is None:
        assert send_refusal("app.a", row_problems, allowlist, None) == expected
