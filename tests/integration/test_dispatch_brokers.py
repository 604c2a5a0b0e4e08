"""Beat's Dispatcher sends the very message Celery's apply_async would, on real brokers.

Each case goes through Celery (``celery_cronstore.publish.publish``) and through the
Dispatcher into Redis (and RabbitMQ), is read back through kombu, decoded, and compared
field by field (tests/dispatch_cases.py). A real worker running Dispatcher messages is
covered by the end-to-end tests (tests/integration/test_e2e_beat.py): beat sends
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
