"""The rules of a fire: what happens to it, decided without SQL, Celery or a clock.

``timers`` says *when*; this package says *what happens to a fire* (task ids, the backlog
walk and the misfire choice, overlap, starting deadlines, the start decision of the
worker's guard, what becomes of a fire whose worker went silent, of a claim whose lease
lapsed and of a published fire that never started, the message rules and the
allowlist); ``store`` records what it decides; the Celery layer sends and runs it.
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
from celery_cronstore.policy.bounds import bounds_problem, ended
from celery_cronstore.policy.edit import (
    REPLAN_FIELDS,
    EditPlan,
    adopted_plan,
    edit_plan,
    first_plan,
    readable_timer,
    replans,
    unclaimed,
)
from celery_cronstore.policy.fires import (
    RUN_NOW_REASON,
    Entry,
    Plan,
    RowUpdate,
    Running,
    fire_task_id,
    make_claim,
    missed_entry,
    plan,
    resume_point,
    runs_left,
    withheld,
)
from celery_cronstore.policy.health import CLOCK_WARN, CLOCK_WARN_EVERY, beat_health
from celery_cronstore.policy.jitter import delay as jitter_delay
from celery_cronstore.policy.messages import (
    H_FIRE,
    H_INTERVAL,
    H_NAME,
    H_REQUESTED,
    MESSAGE_SERIALIZER,
    OPTION_KEYS,
    RESERVED_HEADERS,
    allowed,
    message_options,
    option_problems,
    send_refusal,
)
from celery_cronstore.policy.past import plan_past
from celery_cronstore.policy.plain import PlainDecision, PlainSnapshot, decide_plain_start
from celery_cronstore.policy.redelivery import (
    RedeliveryDecision,
    RedeliverySnapshot,
    decide_redelivery,
    handed_back_lease,
    start_lease,
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
from celery_cronstore.policy.takeover import (
    TakeOverDecision,
    TakeOverSnapshot,
    decide_take_over,
)
from celery_cronstore.policy.timing import interval_after, stray_next_run, timer_of

__all__ = [
    "ABANDONED",
    "CLOCK_WARN",
    "CLOCK_WARN_EVERY",
    "FINISH_STATES",
    "H_FIRE",
    "H_INTERVAL",
    "H_NAME",
    "H_REQUESTED",
    "KILL_SLACK",
    "MAX_RERUNS",
    "MESSAGE_SERIALIZER",
    "OPTION_KEYS",
    "REPLAN_FIELDS",
    "RESERVED_HEADERS",
    "RUN_NOW_REASON",
    "STARTABLE",
    "WALK_LIMIT",
    "WORKER_RUNNING",
    "AbandonDecision",
    "AbandonSnapshot",
    "Backlog",
    "EditPlan",
    "Entry",
    "PlainDecision",
    "PlainSnapshot",
    "Plan",
    "RedeliveryDecision",
    "RedeliverySnapshot",
    "RowUpdate",
    "Running",
    "StartDecision",
    "StartSnapshot",
    "TakeOverDecision",
    "TakeOverSnapshot",
    "abandoned_reason",
    "adopted_plan",
    "allowed",
    "backlog",
    "beat_health",
    "bounds_problem",
    "choose",
    "deadline",
    "decide_abandoned",
    "decide_plain_start",
    "decide_redelivery",
    "decide_start",
    "decide_take_over",
    "edit_plan",
    "ended",
    "fire_task_id",
    "first_plan",
    "handed_back_lease",
    "interval_after",
    "jitter_delay",
    "killed_run_age",
    "lost_reason",
    "make_claim",
    "message_options",
    "missed_entry",
    "option_problems",
    "plan",
    "plan_past",
    "readable_timer",
    "replans",
    "resume_point",
    "runs_left",
    "send_refusal",
    "start_lease",
    "stray_next_run",
    "timer_of",
    "unclaimed",
    "withheld",
]
