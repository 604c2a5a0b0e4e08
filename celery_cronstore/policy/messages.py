"""What a Celery message beat sends may carry, and which tasks beat may send at all.

Pure: the header names, the options a row may set (and why one is refused), the only
serializer, the allowlist, and the time box of a guarded run. How Celery's protocol 2
lays the message out is :mod:`celery_cronstore.beat.wire`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from celery_cronstore.records import Claim

__all__ = [
    "H_FIRE",
    "H_INTERVAL",
    "H_NAME",
    "H_REQUESTED",
    "MESSAGE_SERIALIZER",
    "OPTION_KEYS",
    "RESERVED_HEADERS",
    "allowed",
    "message_options",
    "option_problems",
    "send_refusal",
]

#: The headers beat adds to every message (the worker sees them on ``request``).
H_NAME = "cronstore_name"
H_FIRE = "cronstore_fire_time"
H_INTERVAL = "cronstore_interval"
#: A fire asked for by hand (``run-now``, ``backfill``): see :attr:`Claim.requested`.
H_REQUESTED = "cronstore_requested"

#: Celery options a periodic task row may set.
OPTION_KEYS = frozenset(
    {
        "queue",
        "routing_key",
        "exchange",
        "priority",
        "expires",
        "headers",
        "soft_time_limit",
        "time_limit",
        "serializer",
        "retry",
        "retry_policy",
    }
)
#: Celery protocol-2 message headers (and ours): a row's ``headers`` option may not set
#: them. Celery merges option headers *over* the message's own, so ``{"task": ...}`` there
#: would run another task than the row names (and bypass the allowlist).
RESERVED_HEADERS = frozenset(
    {
        "lang",
        "task",
        "id",
        "shadow",
        "eta",
        "expires",
        "group",
        "group_index",
        "retries",
        "timelimit",
        "root_id",
        "parent_id",
        "argsrepr",
        "kwargsrepr",
        "origin",
        "ignore_result",
        "replaced_task_nesting",
        "stamped_headers",
        "stamps",
        "chord",
        "callbacks",
        "errbacks",
        "chain",
        "reply_to",
        "correlation_id",
        "content_type",
        "content_encoding",
        "celery_beat_task",
    }
)
#: The only serializer a message beat sends may use (see docs/security.md).
MESSAGE_SERIALIZER = "json"
_RETRY_POLICY_KEYS = frozenset({"max_retries", "interval_start", "interval_step", "interval_max"})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _reserved(key: object) -> bool:
    return not isinstance(key, str) or key in RESERVED_HEADERS or key.startswith("cronstore_")


def option_problems(options: Mapping[str, Any]) -> list[str]:
    """Return what makes Celery message options unusable or unsafe (empty: all fine).

    Used for options given to the store API and, at every claim, for options a row holds
    (raw SQL may have written anything): a bad value must put that one task in error,
    never fail a publish (which would hold back every other fire behind it).
    """
    problems: list[str] = []
    unknown = sorted(str(k) for k in options if k not in OPTION_KEYS)
    if unknown:
        problems.append(
            f"unknown Celery option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(OPTION_KEYS))})"
        )
    for key in ("queue", "routing_key", "exchange"):
        value = options.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            problems.append(f"option {key} must be a non-empty string, got {value!r}")
    priority = options.get("priority")
    if priority is not None and (
        not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 255
    ):
        problems.append(f"option priority must be an integer 0..255, got {priority!r}")
    for key in ("soft_time_limit", "time_limit"):
        value = options.get(key)
        if value is not None and (not _number(value) or value <= 0 or value == float("inf")):
            problems.append(f"option {key} must be a positive number of seconds, got {value!r}")
    expires = options.get("expires")
    if expires is not None and not (
        (_number(expires) and 0 <= expires < float("inf")) or _iso_instant(expires)
    ):
        problems.append(
            f"option expires must be seconds or an ISO-8601 instant with offset, got {expires!r}"
        )
    serializer = options.get("serializer")
    if serializer is not None and serializer != MESSAGE_SERIALIZER:
        problems.append(
            f"option serializer {serializer!r} is refused: beat sends JSON messages only "
            "(remove the option)"
        )
    retry = options.get("retry")
    if retry is not None and not isinstance(retry, bool):
        problems.append(f"option retry must be true or false, got {retry!r}")
    problems.extend(_retry_policy_problems(options.get("retry_policy")))
    headers = options.get("headers")
    if headers is not None:
        if not isinstance(headers, Mapping):
            problems.append(f"option headers must be an object, got {type(headers).__name__}")
        else:
            taken = sorted(str(k) for k in headers if _reserved(k))
            if taken:
                problems.append(
                    f"option headers may not set Celery's or cronstore's own header(s) "
                    f"{', '.join(taken)}"
                )
    return problems


def _retry_policy_problems(policy: Any) -> list[str]:
    if policy is None:
        return []
    if not isinstance(policy, Mapping) or set(policy) - _RETRY_POLICY_KEYS:
        return [
            f"option retry_policy must be an object with keys among "
            f"{', '.join(sorted(_RETRY_POLICY_KEYS))}, got {policy!r}"
        ]
    if not all(v is None or (_number(v) and v >= 0) for v in policy.values()):
        return [f"option retry_policy values must be non-negative numbers: {policy!r}"]
    return []


def _iso_instant(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return parsed.utcoffset() is not None


def allowed(name: str, allowlist: tuple[str, ...]) -> bool:
    """Return whether task ``name`` is in ``allowlist`` (empty: every name is).

    An entry is a task name, or a prefix ending in ``.`` (``mail.``) or ``*`` (``mail*``).
    """
    if not allowlist:
        return True
    for entry in allowlist:
        prefix = entry.rstrip("*")
        if name == entry or ((entry != prefix or entry.endswith(".")) and name.startswith(prefix)):
            return True
    return False


def send_refusal(
    task: str,
    row_problems: list[str],
    allowlist: tuple[str, ...],
    task_check: Callable[[str], str | None] | None,
) -> str | None:
    """Return why a fire of ``task`` must not be sent (``None``: it may).

    ``row_problems`` are what is wrong with the row's stored values; ``task_check`` is
    beat's extra rule on names ("is it registered?").
    """
    if row_problems:
        return "; ".join(row_problems)
    if not allowed(task, allowlist):
        return f"task {task!r} is not in cronstore_task_allowlist"
    return None if task_check is None else task_check(task)


def message_options(claim: Claim, *, guarded: bool) -> dict[str, Any]:
    """Return the ``apply_async`` options of ``claim``: headers, serializer, limits, expiry.

    ``guarded``: the task is a CronTask. Its guard enforces the starting deadline on the
    database clock, so it gets no ``expires`` (Celery would measure it on beat's clock, and
    RabbitMQ drops an expired message without a trace); it gets the time box instead: a
    soft limit of half the interval to the next fire (unless set) and a hard one at it.
    """
    options = dict(claim.options)
    # Claims are checked when claimed (option_problems); this is the last line: a header
    # of Celery's own here would override the message's (even its task name).
    headers = {
        k: v for k, v in dict(options.pop("headers", None) or {}).items() if not _reserved(k)
    }
    headers.update(
        {
            "celery_beat_task": True,
            H_NAME: claim.name,
            H_FIRE: claim.fire_time.isoformat(),
            H_INTERVAL: claim.interval,
        }
    )
    if claim.requested is not None:
        headers[H_REQUESTED] = claim.requested
    options["headers"] = headers
    # JSON only, whatever task_serializer says: nothing beat sends can need pickle (args
    # come from JSON columns) and a worker must never have to accept it for our messages.
    options["serializer"] = MESSAGE_SERIALIZER
    if claim.expires is not None and not guarded:
        options["expires"] = claim.expires
    if guarded and claim.interval:
        soft = options.setdefault("soft_time_limit", claim.interval / 2)
        # The hard limit (the only one gevent enforces) kills at the next fire, also when
        # the row chose its own soft limit (never before that soft limit, though).
        options.setdefault("time_limit", max(claim.interval, float(soft) + 1))
    return options
