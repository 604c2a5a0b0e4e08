"""``celery_cronstore.CronTask``: the worker-side guard of periodic runs.

    @app.task(base=celery_cronstore.CronTask, bind=True)
    def poll_mailbox(self, channel_id):
        cursor = self.resume_state or {}
        ...
        if self.out_of_time():
            self.checkpoint(cursor)
            return

A run published by the cronstore beat carries the headers ``cronstore_name``,
``cronstore_fire_time`` and ``cronstore_interval`` (protocol 2 puts custom headers at the
top level of the message headers; the worker copies them onto ``self.request``; an eager
``apply(headers=...)`` keeps them in ``self.request.headers``). Such a run asks the store
before its body runs (``store.runs.start_fire``; the rules are ``policy.decide_start``):
early, duplicate, overlapping and disabled runs are refused and recorded; a run that
starts sets ``last_run`` to its start and gets a deadline of start + interval / 2. How it
ends is recorded (succeeded, failed, timed_out, retrying). A run without those headers
(``.delay()``) runs with no guard.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import celery
from celery.exceptions import (
    Ignore,
    Reject,
    Retry,
    SoftTimeLimitExceeded,
    TimeLimitExceeded,
)
from celery.utils.time import get_exponential_backoff_interval

from celery_cronstore.config import Config
from celery_cronstore.policy import H_FIRE, H_INTERVAL, H_NAME, H_REQUESTED, killed_run_age
from celery_cronstore.states import FireState
from celery_cronstore.store import Store, runs
from celery_cronstore.worker import liveness_for, node_of, store_for, use_store
from celery_cronstore.worker.failure import failure_detail
from celery_cronstore.worker.headers import header, parse_interval, parse_time

__all__ = ["CronTask", "store_for", "use_store"]

logger = logging.getLogger("celery_cronstore.worker.task")

_UTC = timezone.utc
#: id(app) -> (app, tolerance) read from the app's config once per process.
_tolerances: dict[int, tuple[Any, float]] = {}


def _default_tolerance(app: Any) -> float:
    entry = _tolerances.get(id(app))
    if entry is None:
        entry = (app, Config.from_app(app).tolerance)
        _tolerances[id(app)] = entry
    return float(entry[1])


@dataclass
class _Run:
    """What one guarded (or deadline-bound) run knows; kept on its request context."""

    task_id: str | None
    fire_time: datetime | None
    deadline: datetime | None
    started_at: datetime
    started_mono: float
    store: Store | None = None
    resume_state: Any = None
    max_retries: int = 0
    interval: float | None = None
    saw_out_of_time: bool = False
    #: Which run of the fire this is (``RunStart.rerun``): its records are fenced on it.
    rerun: int | None = None

    def now(self) -> datetime:
        """The store's clock, estimated locally: start + monotonic time elapsed since."""
        if self.store is not None and self.store.clock is not None:
            return self.store.clock().astimezone(_UTC)
        return self.started_at + timedelta(seconds=time.monotonic() - self.started_mono)


def _retry_hold(countdown: float | None, abandon_after: float) -> float:
    """How long a fire waiting for its retry stays in flight before it counts as abandoned."""
    wait = float(countdown) if countdown is not None and countdown >= 0 else abandon_after * 4
    return wait + abandon_after


def _pool_hard_limit(exc: BaseException) -> bool:
    """Whether ``exc`` is gevent's ``Timeout``: how the gevent pool ends a run at its hard
    time limit (raised in the run's greenlet; the main process kills nothing there)."""
    return any(
        cls.__name__ == "Timeout" and cls.__module__.startswith("gevent")
        for cls in type(exc).__mro__
    )


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 2000 else text[:1999] + "…"


class CronTask(celery.Task):  # type: ignore[misc]  # Celery ships no types
    """A Celery task guarded for periodic runs (see the module docstring and the guide).

    Class attributes tune the automatic retries a periodic task declares in its
    ``max_retries`` column: exponential backoff ``cronstore_retry_backoff * 2**n``
    seconds, capped at ``cronstore_retry_backoff_max``, with full jitter if
    ``cronstore_retry_jitter``.
    """

    #: Records its own runs (the worker's signal handlers leave it alone).
    cronstore_guarded = True

    cronstore_retry_backoff: float = 2.0
    cronstore_retry_backoff_max: float = 600.0
    cronstore_retry_jitter: bool = False

    # -- what the body can ask ------------------------------------------------------------

    @property
    def _cronstore_run(self) -> _Run | None:
        run = getattr(self.request, "cronstore_run", None)
        return run if isinstance(run, _Run) else None

    @property
    def resume_state(self) -> Any:
        """The state the last ``checkpoint()`` stored for this periodic task (or ``None``)."""
        run = self._cronstore_run
        return None if run is None else run.resume_state

    @property
    def deadline(self) -> datetime | None:
        """When this run's time box ends (aware UTC: start + interval / 2), or ``None``."""
        run = self._cronstore_run
        return None if run is None else run.deadline

    @property
    def fire_time(self) -> datetime | None:
        """The scheduled fire time this run stands for (``None`` when not from beat)."""
        run = self._cronstore_run
        return None if run is None else run.fire_time

    def time_left(self) -> float | None:
        """Seconds left before the deadline (negative once past), or ``None`` without one."""
        run = self._cronstore_run
        if run is None or run.deadline is None:
            return None
        return (run.deadline - run.now()).total_seconds()

    def out_of_time(self) -> bool:
        """Whether the time box is used up: finish cleanly (and ``checkpoint``) when True."""
        left = self.time_left()
        if left is None or left > 0:
            return False
        run = self._cronstore_run
        if run is not None:
            run.saw_out_of_time = True
        return True

    def checkpoint(self, state: Any) -> bool:
        """Store a small JSON ``state`` for the next run (``self.resume_state`` there).

        Only a running fire published by beat can checkpoint; elsewhere this logs a
        warning and returns False. ``checkpoint(None)`` clears the state.
        """
        run = self._cronstore_run
        if run is None or run.store is None or run.task_id is None:
            logger.warning("%s: checkpoint() outside a run published by beat; ignored", self.name)
            return False
        stored = runs.checkpoint(run.store.db, run.task_id, state, run=run.rerun)
        if stored:
            run.resume_state = state
        else:
            logger.warning(
                "%s[%s]: checkpoint not stored: the fire is no longer running",
                self.name,
                run.task_id,
            )
        return stored

    # -- the hooks Celery calls -----------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request_stack.top
        if request is None or request.called_directly:
            return super().__call__(*args, **kwargs)
        name = header(request, H_NAME)
        if not name or not request.id:
            self._plain_run(request)
            return self.run(*args, **kwargs)
        return self._guarded(request, str(name), args, kwargs)

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        """Record a hard time limit kill (reported in the worker's main process).

        That process does not know which run of the fire its child was on: the record is
        fenced on this worker's node and on the run having started a time limit ago
        (``policy.killed_run_age``), so it never ends a re-run started since.
        """
        if isinstance(exc, TimeLimitExceeded) and task_id:
            limit = exc.args[0] if exc.args else None
            fence: dict[str, Any] = {"node": node_of(self.app)}
            if isinstance(limit, (int, float)):
                fence["started_before"] = killed_run_age(limit)
            try:
                if liveness_for(self.app).finish(
                    task_id,
                    FireState.TIMED_OUT,
                    error=f"killed by the hard time limit ({exc})",
                    **fence,
                ):
                    logger.warning("%s[%s]: timed out (hard time limit)", self.name, task_id)
            except Exception:
                logger.exception("%s[%s]: could not record the hard time limit", self.name, task_id)
        super().on_failure(exc, task_id, args, kwargs, einfo)

    # -- internals ------------------------------------------------------------------------

    def _plain_run(self, request: Any) -> None:
        """A run not from beat: no guard; a deadline only if a soft time limit was given."""
        limit = request.soft_time_limit or self.soft_time_limit
        if limit:
            now = datetime.now(_UTC)
            request.cronstore_run = _Run(
                task_id=None,
                fire_time=None,
                deadline=now + timedelta(seconds=float(limit)),
                started_at=now,
                started_mono=time.monotonic(),
            )

    def _guarded(self, request: Any, name: str, args: Any, kwargs: Any) -> Any:
        live = liveness_for(self.app)
        store = live.store
        task_id = str(request.id)
        node = str(request.hostname or socket.gethostname())
        decision = runs.start_fire(
            store.db,
            task_id,
            node=node,
            tolerance=_default_tolerance(self.app),
            retries=int(request.retries or 0),
            interval=parse_interval(header(request, H_INTERVAL)),
            abandon_after=live.abandon_after,
            requested=bool(header(request, H_REQUESTED)),
        )
        if not decision.started:
            logger.warning(
                "%s[%s] %s (%s): %s",
                self.name,
                task_id,
                decision.outcome,
                name,
                decision.reason,
            )
            raise Ignore(decision.reason)
        live.started(task_id, decision.rerun)
        run = _Run(
            task_id=task_id,
            fire_time=decision.fire_time or parse_time(header(request, H_FIRE)),
            deadline=decision.deadline,
            started_at=decision.now,
            started_mono=time.monotonic(),
            store=store,
            resume_state=decision.resume_state,
            max_retries=decision.max_retries,
            interval=decision.interval,
            rerun=decision.rerun,
        )
        request.cronstore_run = run
        try:
            result = self.run(*args, **kwargs)
        except Retry as exc:
            wait = exc.when if isinstance(exc.when, (int, float)) else None
            self._finish(
                run,
                FireState.RETRYING,
                error=f"retry {request.retries + 1}: {exc}",
                hold=_retry_hold(wait, live.abandon_after),
            )
            raise
        except (Ignore, Reject) as exc:  # the body gave up on purpose: no retry
            self._finish(run, FireState.FAILED, error=_error_text(exc), fault=exc)
            raise
        except (SoftTimeLimitExceeded, TimeLimitExceeded) as exc:
            # The traceback says where the body was when its time box ended.
            self._finish(run, FireState.TIMED_OUT, error=self._timeout_text(run, exc), fault=exc)
            raise
        except Exception as exc:
            if int(request.retries or 0) < run.max_retries:
                countdown = get_exponential_backoff_interval(
                    factor=self.cronstore_retry_backoff,
                    retries=int(request.retries or 0),
                    maximum=self.cronstore_retry_backoff_max,
                    full_jitter=self.cronstore_retry_jitter,
                )
                self._finish(
                    run,
                    FireState.RETRYING,
                    error=(
                        f"retry {request.retries + 1} of {run.max_retries} in {countdown}s "
                        f"after {_error_text(exc)}"
                    ),
                    hold=_retry_hold(countdown, live.abandon_after),
                )
                try:
                    raise self.retry(exc=exc, countdown=countdown, max_retries=run.max_retries)
                except Retry:
                    raise
                except Exception as failed:  # the retry could not be sent
                    self._finish(run, FireState.FAILED, error=_error_text(failed), fault=failed)
                    raise
            self._finish(run, FireState.FAILED, error=_error_text(exc), fault=exc)
            raise
        except BaseException as exc:
            if _pool_hard_limit(exc):
                limit = getattr(exc, "seconds", None)
                self._finish(
                    run,
                    FireState.TIMED_OUT,
                    error=f"killed by the hard time limit ({limit}s, {type(exc).__name__})",
                    fault=exc,
                )
            else:
                self._finish(run, FireState.FAILED, error=_error_text(exc), fault=exc)
            raise
        if run.saw_out_of_time or (run.deadline is not None and run.now() >= run.deadline):
            self._finish(
                run, FireState.TIMED_OUT, result=result, error=self._timeout_text(run, None)
            )
        else:
            self._finish(run, FireState.SUCCEEDED, result=result)
        return result

    @staticmethod
    def _timeout_text(run: _Run, exc: BaseException | None) -> str:
        box = "" if run.interval is None else f" of {run.interval / 2:g}s"
        if exc is None:
            return f"time box{box} used up; ended cleanly"
        return f"time box{box} exceeded ({type(exc).__name__})"

    def _finish(
        self,
        run: _Run,
        state: str,
        *,
        result: Any = None,
        error: str | None = None,
        hold: float | None = None,
        fault: BaseException | None = None,
    ) -> None:
        assert run.task_id is not None
        live = liveness_for(self.app)
        for _attempt in range(2):
            try:
                # The soft time limit may strike while we write: try once more. What the
                # failures view shows beside ``error``: the traceback, bounded, scrubbed.
                detail = None if fault is None else failure_detail(fault, self.app)
                ended = live.finish(
                    run.task_id,
                    state,
                    result=result,
                    error=error,
                    detail=detail,
                    hold=hold,
                    run=run.rerun,
                )
            except SoftTimeLimitExceeded:
                state, hold = FireState.TIMED_OUT, None
                error = error or self._timeout_text(run, None)
                continue
            if ended is False:
                logger.warning(
                    "%s[%s]: fire was no longer started when it ended %s",
                    self.name,
                    run.task_id,
                    state,
                )
            return
