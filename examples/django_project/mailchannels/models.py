from django.db import models

from celery_cronstore.contrib.django import owner_of
from celery_cronstore.store import PeriodicTask


class MailChannel(models.Model):
    """A mailbox to poll; it owns its polling task."""

    name = models.CharField(max_length=100)
    #: How often to poll: any celery-cronstore timer (systemd calendar, cron, "every 5m").
    poll_timer = models.CharField(max_length=100, default="*:0/5")

    def __str__(self) -> str:
        return self.name

    def schedule_polling(self) -> PeriodicTask:
        """Add this channel's polling task (removed with the channel)."""
        from mailsite.celery import get_store

        return get_store().add(
            f"poll-mail-channel-{self.pk}",
            task="mailchannels.poll",
            timer=self.poll_timer,
            args=[self.pk],
            owner=owner_of(self),
            description=f"poll {self.name}",
        )
