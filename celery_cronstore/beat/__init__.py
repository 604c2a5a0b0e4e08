"""What runs in ``celery beat``: the scheduler (Celery's hooks only) and the parts it owns.

* :mod:`.scheduler`: :class:`Scheduler`, the glue Celery calls (``setup_schedule``,
  ``tick``, ``close``).
* :mod:`.held`: claims taken ahead of their time, held and published on time.
* :mod:`.chores`: the upkeep between ticks (heartbeat, lost work, history, clock).
* :mod:`.threads`: the background threads (the rest of a prune pass, vacuum).
* :mod:`.dispatch`, :mod:`.publish`: the send path to the broker.
* :mod:`.schedule_sync`: Celery's ``beat_schedule`` mirrored into the store.
* :mod:`.metrics`, :mod:`.checks`: beat's Prometheus metrics and start-up checks.

Nothing is imported here: ``import celery_cronstore.beat.held`` must not load Celery's
beat machinery it does not need.
"""
