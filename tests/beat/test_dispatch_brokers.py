"""Beat's Dispatcher sends the very message Celery's apply_async would, on real brokers.

Each case goes through Celery (``celery_cronstore.beat.publish.publish``) and through the
Dispatcher into Redis (and RabbitMQ), is read back through kombu, decoded, and compared
field by field (tests/dispatch_cases.py). A real worker running Dispatcher messages is
covered by the end-to-end tests (tests/e2e/test_e2e_beat.py): beat sends
through the Dispatcher.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from dispatch_cases import CASE_IDS, case_named, check_case, make_app, purge


def run_case(broker: str, case_id: str) -> None:
    queue = f"cronstore-dispatch-{uuid.uuid4().hex[:8]}"
    app = make_app(broker, queue)
    try:
        check_case(app, case_named(queue, case_id))
    finally:
        if broker.startswith("amqp"):  # RabbitMQ refuses to purge a queue never declared
            with app.connection_for_write() as conn:
                for name in (queue, f"{queue}.other"):
                    conn.default_channel.queue_delete(name)
        else:
            purge(app, [queue, f"{queue}.other"])


@pytest.mark.redis
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_dispatcher_message_equals_celerys_on_redis(redis_url: str, case_id: str) -> None:
    run_case(redis_url, case_id)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_dispatcher_message_equals_celerys_on_rabbitmq(rabbitmq_url: str, case_id: str) -> None:
    run_case(rabbitmq_url, case_id)


@pytest.mark.rabbitmq
def test_a_confirmed_batch_on_rabbitmq_sends_every_message(rabbitmq_url: str) -> None:
    from dispatch_cases import producer_of, read

    from celery_cronstore.beat.confirm import confirming
    from celery_cronstore.beat.dispatch import Dispatcher

    queue = f"cronstore-dispatch-{uuid.uuid4().hex[:8]}"
    app = make_app(rabbitmq_url, queue)
    claims = [case_named(queue, "plain").claim for _ in range(5)]
    try:
        with producer_of(app) as producer:
            dispatcher = Dispatcher(app, producer)
            if not dispatcher._celery:  # Celery < 5.7: every claim takes Celery's own path
                pytest.skip("the fast path reproduces Celery 5.7's message only")
            assert confirming(producer)
            with dispatcher.batch(250):
                for claim in claims:
                    dispatcher.send(claim)
                assert dispatcher._tally.sent == len(claims)  # on the confirmed channel
        ids = [read(app, queue)["headers"]["id"] for _ in claims]
        assert sorted(ids) == sorted(c.task_id for c in claims)
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)


@pytest.mark.redis
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_a_templated_fire_equals_celerys_on_redis(redis_url: str, case_id: str) -> None:
    """The fast path: the fire of a second row of the same task and options is filled into
    the message kombu built for the first (its id, name, arguments, fire time, interval,
    so its time box, and expiry); it must decode to what Celery sends for it, field by
    field."""
    from dataclasses import replace

    from dispatch_cases import assert_same, producer_of, read

    from celery_cronstore.beat.dispatch import Dispatcher
    from celery_cronstore.beat.publish import publish

    queue = f"cronstore-dispatch-{uuid.uuid4().hex[:8]}"
    app = make_app(redis_url, queue)
    case = case_named(queue, case_id)
    first = case.claim
    second = replace(  # another row of the same task and options: the same shape
        first,
        periodic_task_id=first.periodic_task_id + 1,
        name=f"{first.name}-b",
        args=[a + 1 if isinstance(a, int) else f"{a}ü" for a in first.args],
        kwargs={k: v + 1 if isinstance(v, int) else v for k, v in first.kwargs.items()},
        task_id=str(uuid.uuid4()),
        fire_time=first.fire_time + timedelta(seconds=90),
        interval=(first.interval or 60.0) * 2,
    )
    try:
        with producer_of(app) as producer:
            publish(app, second, producer)
        celery = read(app, case.queue)
        with producer_of(app) as producer:
            dispatcher = Dispatcher(app, producer)
            if not dispatcher._celery:
                pytest.skip("the fast path reproduces Celery 5.7's message only")
            with dispatcher.batch(250):
                dispatcher.send(first)
                dispatcher.send(second)
            assert dispatcher.templated == 1  # the second went from the first's template
        read(app, case.queue)  # the first fire's
        fast = read(app, case.queue)
        assert_same(celery, fast)
        assert fast["headers"]["id"] == fast["headers"]["root_id"] == second.task_id
        assert fast["properties"]["correlation_id"] == second.task_id
        assert fast["headers"]["cronstore_fire_time"] == second.fire_time.isoformat()
        assert fast["headers"]["cronstore_name"] == second.name
        assert fast["body"][:2] == [second.args, second.kwargs]
    finally:
        purge(app, [queue, f"{queue}.other"])


@pytest.mark.redis
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_a_fire_rendered_ahead_equals_celerys_on_redis(redis_url: str, case_id: str) -> None:
    """A fire taken ahead has its message rendered when it is held (``prepare``) and sent
    as it is when it falls due: it must decode to what Celery sends for it. A message with
    an expiry (its TTL counts from the send) is not rendered ahead, and is built when it
    goes."""
    from dataclasses import replace

    from dispatch_cases import assert_same, producer_of, read

    from celery_cronstore.beat.dispatch import Dispatcher
    from celery_cronstore.beat.publish import publish

    queue = f"cronstore-dispatch-{uuid.uuid4().hex[:8]}"
    app = make_app(redis_url, queue)
    case = case_named(queue, case_id)
    first = case.claim
    later = replace(  # another row of the same task and options, held for its time
        first,
        periodic_task_id=first.periodic_task_id + 2,
        name=f"{first.name}-c",
        args=[a + 2 if isinstance(a, int) else f"{a}é" for a in first.args],
        task_id=str(uuid.uuid4()),
        fire_time=first.fire_time + timedelta(seconds=180),
    )
    try:
        with producer_of(app) as producer:
            publish(app, later, producer)
        celery = read(app, case.queue)
        with producer_of(app) as producer:
            dispatcher = Dispatcher(app, producer)
            if not dispatcher._celery:
                pytest.skip("the fast path reproduces Celery 5.7's message only")
            assert dispatcher.prepare([later]) == 0  # nothing learnt yet
            with dispatcher.batch(250):
                dispatcher.send(first)
            expires = "expiration" in celery["properties"] or celery["headers"]["expires"]
            assert dispatcher.prepare([later]) == (0 if expires else 1)
            with dispatcher.batch(250):
                dispatcher.send(later)
            assert dispatcher.templated == 1
            assert not dispatcher.filler._ready  # sent: nothing rendered ahead is kept
        read(app, case.queue)  # the first fire's
        fast = read(app, case.queue)
        assert_same(celery, fast)
        assert fast["headers"]["id"] == later.task_id
        assert fast["headers"]["cronstore_name"] == later.name
        assert fast["body"][:2] == [later.args, later.kwargs]
    finally:
        purge(app, [queue, f"{queue}.other"])


@pytest.mark.redis
def test_the_fast_path_can_be_turned_off(redis_url: str) -> None:
    from dataclasses import replace

    from dispatch_cases import producer_of

    from celery_cronstore.beat.dispatch import Dispatcher

    queue = f"cronstore-dispatch-{uuid.uuid4().hex[:8]}"
    app = make_app(redis_url, queue)
    first = case_named(queue, "plain").claim
    try:
        with producer_of(app) as producer:
            dispatcher = Dispatcher(app, producer, fast=False)
            with dispatcher.batch(250):
                dispatcher.send(first)
                dispatcher.send(replace(first, task_id=str(uuid.uuid4())))
            assert dispatcher.templated == 0
        with app.connection_for_read() as conn:
            assert conn.default_channel.client.llen(queue) == 2
    finally:
        purge(app, [queue])
