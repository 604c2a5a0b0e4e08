"""Bringing schedules in from elsewhere, and out again.

* :mod:`.records`: what a source yields (:class:`Incoming`, :class:`Refused`);
* :mod:`.convert`: the peers' schedules (Celery's ``crontab``/``schedule``, RedBeat's
  ``rrule``, plain fields) as cronstore timers;
* :mod:`.sources`: one reader per peer (django-celery-beat, RedBeat,
  sqlalchemy-celery-beat, ``beat_schedule`` and Celery's shelve file);
* :mod:`.plan`: what importing or applying them would change (pure);
* :mod:`.document`: the export/apply file format.

Nothing here writes the store: :meth:`celery_cronstore.store.Store.adopt` does, in one
transaction.
"""
