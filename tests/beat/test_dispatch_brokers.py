"""Beat's Dispatcher sends the very message Celery's apply_async would, on real brokers.

Each case goes through Celery (``celery_cronstore.beat.publish.publish``) and through the
Dispatcher into Redis (and RabbitMQ), is read back through kombu, decoded, and compared
field by field (tests/dispatch_cases.py). A real worker running Dispatcher messages is
covered by the end-to-end tests (tests/e2e/test_e2e_beat.py): beat sends
through the Dispatcher.
"""

from __future__ import annotations

import uuid

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

    from celery_cronstore.beat.dispatch import Dispatcher

    queue = f"cronstore-dispatch-{uuid.uuid4().hex[:8]}"
    app = make_app(rabbitmq_url, queue)
    claims = [case_named(queue, "plain").claim for _ in range(5)]
    try:
        with producer_of(app) as producer:
            dispatcher = Dispatcher(app, producer)
            if not dispatcher._celery:  # Celery < 5.7: every claim takes Celery's own path
                pytest.skip("the fast path reproduces Celery 5.7's message only")
            assert dispatcher._confirming()
            with dispatcher.batch(250):
                for claim in claims:
                    dispatcher.send(claim)
            assert dispatcher._unconfirmed == len(claims)
        ids = [read(app, queue)["headers"]["id"] for _ in claims]
        assert sorted(ids) == sorted(c.task_id for c in claims)
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)
