"""The fast path's templates (``beat.template``): what kombu wrote, with slots."""

from __future__ import annotations

import json
from typing import Any

import pytest

from celery_cronstore.beat.template import learn


def envelope(**changes: Any) -> dict[str, Any]:
    """A kombu Redis envelope shaped as beat's messages are."""
    message: dict[str, Any] = {
        "body": "W1tdLCB7fV0=",
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "task": "t.do",
            "id": "id-1",
            "root_id": "id-1",
            "expires": None,
            "timelimit": [None, None],
            "argsrepr": "[1]",
            "kwargsrepr": "{}",
            "cronstore_name": "row-1",
            "cronstore_fire_time": "2026-11-28T06:00:00+00:00",
            "cronstore_interval": 60.0,
            "x-team": "ops",
        },
        "properties": {
            "correlation_id": "id-1",
            "argsrepr": "[1]",
            "kwargsrepr": "{}",
            "priority": 0,
            "delivery_info": {"exchange": "", "routing_key": "q"},
            "body_encoding": "base64",
            "delivery_tag": "tag-1",
        },
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if value is None:
            del message[section][field]
        else:
            message[section][field] = value
    return message


OWN = ("id-1", "2026-11-28T06:00:00+00:00", "[1]", "{}")
NEXT = {
    "id": "id-2",
    "root_id": "id-2",
    "correlation_id": "id-2",
    "delivery_tag": "tag-2",
    "body": "W1syXSwge31d",
    "argsrepr": "[2, 'é\"']",
    "kwargsrepr": "{'a': 1}",
    "name": "row-2",
    "fire_time": "2026-11-28T06:01:00+00:00",
    "interval": 120.0,
    "timelimit": [240.0, 120.0],
    "expires": None,
}


def test_a_template_renders_the_next_fire_into_kombus_envelope() -> None:
    template = learn([("lpush", ("q", json.dumps(envelope())))], OWN)
    assert template is not None
    assert template.key == "q"
    got = json.loads(template.render(NEXT))
    want = envelope()
    want["body"] = NEXT["body"]
    want["headers"].update(
        id="id-2", root_id="id-2", argsrepr=NEXT["argsrepr"], kwargsrepr=NEXT["kwargsrepr"],
        cronstore_name="row-2", cronstore_fire_time=NEXT["fire_time"], cronstore_interval=120.0,
        timelimit=[240.0, 120.0],
    )  # fmt: skip
    want["properties"].update(
        correlation_id="id-2", delivery_tag="tag-2", argsrepr=NEXT["argsrepr"],
        kwargsrepr=NEXT["kwargsrepr"],
    )  # fmt: skip
    assert got == want


@pytest.mark.parametrize(
    ("commands", "why"),
    [
        ([], "nothing buffered"),
        ([("lpush", ("q", "{}")), ("pexpire", ("q", 1000))], "a queue with an expiry"),
        ([("rpush", ("q", json.dumps(envelope())))], "not an LPUSH"),
        ([("lpush", ("q", "not json"))], "not JSON"),
        ([("lpush", ("q", json.dumps(envelope(headers__id=None))))], "a required slot missing"),
        (
            [("lpush", ("q", json.dumps(envelope(headers__trace="id-1"))))],
            "the fire's own id elsewhere",
        ),
        (
            [("lpush", ("q", json.dumps(envelope(headers__origin="@@cronstore-slot:x"))))],
            "a mark's text in a value",
        ),
    ],
)
def test_no_template_when_a_message_is_not_a_plain_template(
    commands: list[tuple[str, tuple[Any, ...]]], why: str
) -> None:
    assert learn(commands, OWN) is None, why


def test_expiration_is_a_slot_only_when_the_message_has_one() -> None:
    plain = learn([("lpush", ("q", json.dumps(envelope())))], OWN)
    expiring = learn([("lpush", ("q", json.dumps(envelope(properties__expiration="5000"))))], OWN)
    assert plain is not None
    assert "expiration" not in plain.slots
    assert expiring is not None
    assert "expiration" in expiring.slots
    got = json.loads(expiring.render({**NEXT, "expiration": "7000"}))
    assert got["properties"]["expiration"] == "7000"
