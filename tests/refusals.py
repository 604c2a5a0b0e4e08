"""The bad inputs every window refuses with the same message (``tests/windows/test_fields.py``
drives the API, the command line and the dashboard; the Django admin test drives its form).

Each case changes a good definition (``app.pair`` registered, taking ``(a, b)``) in one
way; the message is the part every window shows (a window may add how to override it).
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from celery_cronstore import fields

#: A definition every window accepts.
GOOD: dict[str, Any] = {"task": "app.pair", "timer": "every 1h", "args": [1, 2]}

#: ``(case, changes to GOOD, the field that is wrong, what the message says)``.
REFUSALS: list[tuple[str, dict[str, Any], str, str]] = [
    ("bad timer", {"timer": "*-*-32 10:00"}, "timer", "day 32 is out of range 1..31"),
    ("args do not fit", {"args": [1]}, "args", "do not fit task 'app.pair'"),
    ("unknown task", {"task": "app.nope"}, "task", "task 'app.nope' is not registered in app"),
    (
        "past one-off",
        {"timer": "2020-01-01T09:00:00Z"},
        "timer",
        "the one-off instant 2020-01-01T09:00:00Z is already past",
    ),
    (
        "negative tolerance",
        {"tolerance": -1},
        "tolerance",
        "tolerance must be a non-negative number of seconds, got -1",
    ),
    (
        "negative start deadline",
        {"start_deadline": -5},
        "start_deadline",
        "start_deadline must be a non-negative number of seconds, got -5",
    ),
    (
        "misfire_limit 0",
        {"misfire_limit": 0},
        "misfire_limit",
        "misfire_limit must be a whole number of at least 1, got 0",
    ),
    (
        "misfire_limit negative",
        {"misfire_limit": -3},
        "misfire_limit",
        "misfire_limit must be a whole number of at least 1, got -3",
    ),
    (
        "max_retries negative",
        {"max_retries": -1},
        "max_retries",
        "max_retries must be a non-negative integer, got -1",
    ),
    (
        "unknown policy",
        {"overlap_policy": "never"},
        "overlap_policy",
        "overlap_policy must be one of ('allow', 'skip', 'buffer_one', 'replace'), got 'never'",
    ),
    ("unknown option", {"options": {"bogus": 1}}, "options", "unknown Celery option(s) bogus"),
    (
        "bad alert_after",
        {"alert_after": "5x"},
        "alert_after",
        "alert_after '5x': unknown unit 'x' in '5x': use w, d, h, m or s",
    ),
    (
        "jitter too long",
        {"jitter": 700_000},
        "jitter",
        "jitter must be from 0 to 604800 seconds (a week), got 700000",
    ),
    (
        "end without offset",
        {"end_at": "2099-01-01T00:00:00"},
        "end_at",
        "end_at 2099-01-01T00:00:00 has no offset: add one",
    ),
    (
        "end before start",
        {"start_at": "2099-06-01T00:00:00+00:00", "end_at": "2099-01-01T00:00:00+00:00"},
        "end_at",
        "end_at 2099-01-01T00:00:00+00:00 is not after start_at 2099-06-01T00:00:00+00:00",
    ),
    ("unknown calendar", {"exclude": "nope"}, "exclude", "exclude names no calendar 'nope'"),
    ("bad calendar name", {"exclude": "a b"}, "exclude", "'a b' is not a calendar name"),
    (
        "past end",
        {"end_at": "2020-01-01T00:00:00Z"},
        "end_at",
        "end_at 2020-01-01T00:00:00+00:00 is already past: the task would never fire",
    ),
]


def make_app(url: str) -> Celery:
    """Return an app that registers ``app.pair(a, b)`` and refuses unregistered tasks."""
    app = Celery("refusals", broker="memory://", set_as_current=False)
    app.conf.cronstore_url = url
    app.conf.cronstore_require_registered = True

    @app.task(name="app.pair", shared=False)
    def pair(a: int, b: int) -> int:
        return a + b

    return app


def as_text(values: dict[str, Any]) -> dict[str, str]:
    """Return ``values`` as the text a form or a command line gives (per the table)."""
    table = fields.by_name()
    return {key: table[key].text(value) for key, value in values.items()}
