"""The example project: mail channels, each polled by a periodic task it owns."""

from mailsite.celery import app as celery_app

__all__ = ["celery_app"]
