"""The message cases both send paths must agree on (beat's Dispatcher and Celery's own
``apply_async`` / ``send_task`` through :func:`celery_cronstore.beat.publish.publish`).

Used by tests/beat/test_dispatch_messages.py (kombu's memory transport) and
tests/beat/test_dispatch_brokers.py (real Redis and RabbitMQ). Messages are read
back through kombu, decoded, and compared field by field.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import Celery
from kombu import Queue as _Queue

from celery_cronstore.beat.dispatch import Dispatcher
from celery_cronstore.beat.publish import publish
from celery_cronstore.records import Claim
from celery_cronstore.worker.task import CronTask

UTC = timezone.utc
#: kombu ships no types.
Queue: Any = _Queue
FIRE = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Case:
    """One claim, the queue its message lands in, and what the case checks on top."""

    id: str
    claim: Claim
    queue: str


def make_app(broker: str, queue: str) -> Celery:
    """Return an app on ``broker`` with a plain task, a CronTask and a task with options."""
    app = Celery("dispatch-cases", broker=broker, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"confirm_publish": True},
        task_routes={"elsewhere.*": {"queue": queue}},
    )

    @app.task(shared=False, name="cases.plain", soft_time_limit=50)
    def plain(a: int, label: str = "", extra: dict[str, Any] | None = None) -> None:
        """A plain task."""

    @app.task(shared=False, name="cases.guarded", base=CronTask)
    def guarded(n: int = 0) -> None:
        """A CronTask: time box in the timelimit header, no expires."""

    @app.task(shared=False, name="cases.routed", time_limit=120, ignore_result=True)
    def routed(**kwargs: Any) -> None:
        """A task whose own options (time limit, ignore_result) merge with the row's."""

    return app


def cases(queue: str) -> list[Case]:
    """Return the claims of every case (``queue`` names this run's default queue)."""
    other = f"{queue}.other"

    def claim(name: str, task: str, **fields: Any) -> Claim:
        values: dict[str, Any] = {
            "periodic_task_id": 7,
            "name": name,
            "task": task,
            "args": [],
            "kwargs": {},
            "options": {},
            "fire_time": FIRE,
            "task_id": str(uuid.uuid4()),
            "attempt": 1,
            "interval": 300.0,
        }
        values.update(fields)
        return Claim(**values)

    soon = datetime.now(UTC) + timedelta(minutes=10)
    return [
        Case(
            "plain",
            claim(
                "plain",
                "cases.plain",
                args=[1, "é\n"],
                kwargs={"extra": {"k": [1.5, None, True]}},
            ),
            queue,
        ),
        Case(
            "crontask",
            # A deadline (expires) the guard enforces: no expires header, a time box.
            claim("guarded", "cases.guarded", kwargs={"n": 3}, expires=soon, interval=60.0),
            queue,
        ),
        Case(
            "crontask-own-soft-limit",
            claim("guarded2", "cases.guarded", options={"soft_time_limit": 5}, interval=60.0),
            queue,
        ),
        Case(
            "options",
            claim(
                "routed",
                "cases.routed",
                kwargs={"to": "x"},
                options={
                    "queue": other,
                    "priority": 5,
                    "expires": 300,
                    "headers": {"x-team": "ops"},
                    "time_limit": 30,
                },
            ),
            other,
        ),
        Case(
            "options-iso-expires",
            claim(
                "routed2",
                "cases.plain",
                args=[2],
                options={"expires": soon.isoformat(), "routing_key": queue},
            ),
            queue,
        ),
        Case("plain-deadline", claim("plain2", "cases.plain", args=[3], expires=soon), queue),
        Case(
            "unregistered",
            claim(
                "remote",
                "elsewhere.remote_task",
                args=["a"],
                kwargs={"b": 2},
                options={"priority": 2, "headers": {"trace": "t-1"}},
            ),
            queue,
        ),
    ]


#: The case ids, in order (tests parametrize over them and build the claims per run).
CASE_IDS = (
    "plain",
    "crontask",
    "crontask-own-soft-limit",
    "options",
    "options-iso-expires",
    "plain-deadline",
    "unregistered",
)


def case_named(queue: str, case_id: str) -> Case:
    """Return the case ``case_id`` for a run whose default queue is ``queue``."""
    (found,) = [c for c in cases(queue) if c.id == case_id]
    return found


@contextmanager
def producer_of(app: Celery) -> Iterator[Any]:
    with app.producer_or_acquire() as producer:
        yield producer


def read(app: Celery, queue: str) -> dict[str, Any]:
    """Take one message from ``queue`` and return its decoded, comparable fields."""
    with app.connection_for_read() as conn:
        message = Queue(queue, channel=conn.default_channel).get(no_ack=True)
        assert message is not None, f"no message in {queue}"
        properties = dict(message.properties)
        delivery = properties.pop("delivery_info", None) or {}
        properties.pop("delivery_tag", None)  # a fresh uuid per publish (virtual transports)
        properties.pop("application_headers", None)  # py-amqp: the same as message.headers
        info = {**delivery, **message.delivery_info}
        return {
            "headers": dict(message.headers),
            "properties": properties,
            "content_type": message.content_type,
            "content_encoding": message.content_encoding,
            "body": json.loads(message.body),
            "routing": (info.get("exchange"), info.get("routing_key")),
            "priority": info.get("priority", properties.get("priority")),
        }


def both(app: Celery, case: Case) -> tuple[dict[str, Any], dict[str, Any]]:
    """Send ``case`` through Celery and through the Dispatcher; return both messages."""
    with producer_of(app) as producer:
        publish(app, case.claim, producer)
    celery = read(app, case.queue)
    with producer_of(app) as producer:
        Dispatcher(app, producer).send(case.claim)
    fast = read(app, case.queue)
    return celery, fast


def assert_same(celery: dict[str, Any], fast: dict[str, Any]) -> None:
    """Assert two decoded messages are the same, field by field (expiry: to the second)."""
    celery, fast = json.loads(json.dumps(celery)), json.loads(json.dumps(fast))
    ch, fh = celery.pop("headers"), fast.pop("headers")
    c_exp, f_exp = ch.pop("expires"), fh.pop("expires")
    assert (c_exp is None) == (f_exp is None), (c_exp, f_exp)
    if c_exp is not None:
        gap = datetime.fromisoformat(c_exp) - datetime.fromisoformat(f_exp)
        assert abs(gap.total_seconds()) < 2, (c_exp, f_exp)
    assert sorted(ch) == sorted(fh)
    for key in ch:
        assert ch[key] == fh[key], (key, ch[key], fh[key])
    cp, fp = celery.pop("properties"), fast.pop("properties")
    c_ttl, f_ttl = cp.pop("expiration", None), fp.pop("expiration", None)
    assert (c_ttl is None) == (f_ttl is None), (c_ttl, f_ttl)
    if c_ttl is not None:
        assert abs(int(c_ttl) - int(f_ttl)) < 2000, (c_ttl, f_ttl)
    assert sorted(cp) == sorted(fp)
    for key in cp:
        assert cp[key] == fp[key], (key, cp[key], fp[key])
    for key in sorted(celery):
        assert celery[key] == fast[key], (key, celery[key], fast[key])


def check_case(app: Celery, case: Case) -> dict[str, Any]:
    """Compare both paths for ``case``; return the fast path's message for extra checks."""
    celery, fast = both(app, case)
    assert_same(celery, fast)
    assert fast["headers"]["id"] == case.claim.task_id
    assert fast["headers"]["cronstore_name"] == case.claim.name
    assert fast["content_type"] == "application/json"
    return fast


def purge(app: Celery, queues: list[str]) -> None:
    with app.connection_for_write() as conn:
        for name in queues:
            Queue(name, channel=conn.default_channel).purge()
