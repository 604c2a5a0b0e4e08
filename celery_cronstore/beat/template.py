"""The fast path to Redis: a message shape built once, each fire filled in.

The fires of one task with one set of options have the same message but for a few
values: the task id (the ``id`` and ``root_id`` headers, the ``correlation_id``
property), kombu's delivery tag, the row's name, arguments (the body and their reprs),
the fire time and interval headers, the time box (a CronTask's depends on the interval
to the next fire) and the expiry. The first such fire goes through
:class:`~celery_cronstore.beat.dispatch.Dispatcher`'s full path, and kombu's own Redis
channel turns it into the ``LPUSH`` of its JSON envelope (routing, queue key with
priority, body encoding). :func:`learn` reads that envelope back and marks where the
per-fire values sit; :meth:`Template.render` joins the fixed text with the next fire's
values. The route comes from Celery's router once per task and option set, not per fire
(the Dispatcher uses templates only when every router routes by task name).

Hand-written because neither Celery nor kombu can build a message from a template; what
kombu writes is reused verbatim rather than reproduced, so the message is kombu's own
(``tests/beat/test_dispatch_brokers.py`` compares templated messages with
``send_task``'s field by field). A message kombu would send with more than one command
(a queue with an expiry), or whose envelope is not the expected shape, gets no template:
each of its fires takes the full path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

__all__ = ["SLOTS", "Template", "learn"]

#: Where each per-fire value sits in kombu's envelope: (section, key) pairs. Celery puts
#: the argument reprs in the properties as well as the headers.
SLOTS: dict[str, tuple[tuple[str, str], ...]] = {
    "id": (("headers", "id"),),
    "root_id": (("headers", "root_id"),),
    "correlation_id": (("properties", "correlation_id"),),
    "delivery_tag": (("properties", "delivery_tag"),),
    "body": (("envelope", "body"),),
    "argsrepr": (("headers", "argsrepr"), ("properties", "argsrepr")),
    "kwargsrepr": (("headers", "kwargsrepr"), ("properties", "kwargsrepr")),
    "name": (("headers", "cronstore_name"),),
    "fire_time": (("headers", "cronstore_fire_time"),),
    "interval": (("headers", "cronstore_interval"),),
    "timelimit": (("headers", "timelimit"),),
    "expires": (("headers", "expires"),),
    "expiration": (("properties", "expiration"),),
}
#: Slots a message may lack (the rest must be there, or there is no template).
OPTIONAL = frozenset({"expiration", "argsrepr", "kwargsrepr"})

_PREFIX = "@@cronstore-slot:"
#: ``json.dumps`` of a string (ASCII-escaped, as kombu's JSON), without its overhead.
_quote: Any = encode_basestring_ascii


@dataclass(frozen=True)
class Template:
    """One task's Redis message (for one option set) with its per-fire values left out."""

    #: The Redis list the message goes to (the queue, with its priority suffix).
    key: Any
    #: The envelope's JSON text around the slots: ``len(slots) + 1`` pieces.
    pieces: tuple[str, ...]
    #: The slot names, in the order they appear in the text.
    slots: tuple[str, ...]

    def render(self, values: dict[str, Any]) -> str:
        """Return the envelope's JSON text with ``values`` (one per slot) filled in."""
        pieces, out = self.pieces, [self.pieces[0]]
        for slot, piece in zip(self.slots, pieces[1:], strict=True):
            value = values[slot]
            # The values are mostly text: json's own C quoting, as json.dumps would.
            kind = value.__class__
            if kind is str:
                out.append(_quote(value))
            elif value is None:
                out.append("null")
            else:
                out.append(json.dumps(value))
            out.append(piece)
        return "".join(out)


def learn(
    commands: list[tuple[str, tuple[Any, ...]]], own: tuple[str, ...] = ()
) -> Template | None:
    """Return the template of the message kombu buffered as ``commands`` (the Redis
    commands of one publish), or ``None`` when it cannot be templated.

    ``own``: values of that fire alone (its task id, fire time, argument reprs): found
    anywhere but in a slot, they would be sent with every fire, so there is no template.
    """
    if len(commands) != 1 or commands[0][0] != "lpush" or len(commands[0][1]) != 2:
        return None
    key, text = commands[0][1]
    marks: dict[str, str] = {}
    try:
        envelope = json.loads(text)
        for name, places in SLOTS.items():
            for i, (section, field) in enumerate(places):
                part = envelope if section == "envelope" else envelope[section]
                if field not in part:
                    if name in OPTIONAL:
                        continue
                    return None
                mark = f'"{_PREFIX}{name}#{i}@@"'
                part[field] = json.loads(mark)
                marks[mark] = name
        marked = json.dumps(envelope)
    except (TypeError, ValueError, KeyError):
        return None
    order = sorted((marked.index(mark), mark) for mark in marks)
    slots = tuple(marks[mark] for _, mark in order)
    pieces, rest = [], marked
    for _, mark in order:
        before, _, rest = rest.partition(mark)
        pieces.append(before)
    pieces.append(rest)
    leaks = [json.dumps(value) for value in own] + [_PREFIX]
    if any(leak in piece for piece in pieces for leak in leaks):
        return None  # a fire's own value outside the slots, or a mark twice: no guessing
    return Template(key=key, pieces=tuple(pieces), slots=slots)
