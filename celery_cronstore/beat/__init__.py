"""What runs in ``celery beat``: the scheduler (Celery's hooks only) and the parts it owns.

* :mod:`.scheduler`: :class:`Scheduler`, the glue Celery calls (``setup_schedule``,
  ``tick``, ``close``); it builds the parts below once the store is open.
* :mod:`.loop`: :class:`Loop`, one tick over the parts, and the back-off after a failure.
* :mod:`.send`: :class:`Sender`, the one way to publish claims and record the outcome.
* :mod:`.held`: :class:`HeldClaims`, claims taken ahead of their time, published on time.
* :mod:`.chores`: :class:`Chores`, the upkeep between ticks (heartbeat, lost work,
  history, clock).
* :mod:`.threads`: the background threads (the rest of a prune pass, vacuum).
* :mod:`.dispatch`, :mod:`.publish`, :mod:`.wire`: the send path to the broker, and
  Celery's protocol-2 layout of the message.
* :mod:`.schedule_sync`: Celery's ``beat_schedule`` mirrored into the store.
* :mod:`.metrics`, :mod:`.checks`: beat's Prometheus metrics and start-up checks.

The parts talk to the sender, never to the scheduler. Nothing is imported here:
``import celery_cronstore.beat.held`` must not load Celery's beat machinery it does not
need.
"""
