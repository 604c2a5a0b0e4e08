"""The rules of a fire: what happens to it, decided without SQL, Celery or a clock.

``timers`` says *when*; this package says *what happens to a fire* (task ids, the backlog
walk and the misfire choice, overlap, starting deadlines, the start decision of the
worker's guard, what becomes of a fire whose worker went silent, the message rules and
the allowlist); ``store`` records what it decides; the Celery layer sends and runs it.
"""

from __future__ import annotations

from celery_cronstore.policy.abandon import (
    ABANDONED,
    KILL_SLACK,
    MAX_RERUNS,
    AbandonDecision,
    AbandonSnapshot,
    abandoned_reason,
    decide_abandoned,
    killed_run_age,
)
from celery_cronstore.policy.backlog import WALK_LIMIT, Backlog, backlog, choose
from celery_cronstore.policy.fires import (
    BEAT_IN_FLIGHT,
    Entry,
    Plan,
    RowUpdate,
    Running,
    fire_task_id,
    make_claim,
    missed_entry,
    plan,
    plan_past,
)
from celery_cronstore.policy.health import CLOCK_WARN, CLOCK_WARN_EVERY, beat_health
from celery_cronstore.policy.messages import (
    H_FIRE,
    H_INTERVAL,
    H_NAME,
    MESSAGE_SERIALIZER,
    OPTION_KEYS,
    RESERVED_HEADERS,
    allowed,
    message_options,
    option_problems,
    send_refusal,
)
from celery_cronstore.policy.start import (
    FINISH_STATES,
    STARTABLE,
    WORKER_RUNNING,
    StartDecision,
    StartSnapshot,
    deadline,
    decide_start,
    lost_reason,
)
from celery_cronstore.policy.timing import interval_after, stray_next_run, timer_of

__all__ = [
    "ABANDONED",
    "BEAT_IN_FLIGHT",
    "CLOCK_WARN",
    "CLOCK_WARN_EVERY",
    "FINISH_STATES",
    "H_FIRE",
    "H_INTERVAL",
    "H_NAME",
    "KILL_SLACK",
    "MAX_RERUNS",
    "MESSAGE_SERIALIZER",
    "OPTION_KEYS",
    "RESERVED_HEADERS",
    "STARTABLE",
    "WALK_LIMIT",
    "WORKER_RUNNING",
    "AbandonDecision",
    "AbandonSnapshot",
    "Backlog",
    "Entry",
    "Plan",
    "RowUpdate",
    "Running",
    "StartDecision",
    "StartSnapshot",
    "abandoned_reason",
    "allowed",
    "backlog",
    "beat_health",
    "choose",
    "deadline",
    "decide_abandoned",
    "decide_start",
    "fire_task_id",
    "interval_after",
    "killed_run_age",
    "lost_reason",
    "make_claim",
    "message_options",
    "missed_entry",
    "option_problems",
    "plan",
    "plan_past",
    "send_refusal",
    "stray_next_run",
    "timer_of",
]
