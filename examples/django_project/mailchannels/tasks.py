from celery import shared_task

from mailchannels.models import MailChannel


@shared_task(name="mailchannels.poll")
def poll(channel_id: int) -> str:
    """Pretend to fetch new mail for one channel."""
    channel = MailChannel.objects.filter(pk=channel_id).first()
    if channel is None:  # deleted while the message was on its way
        return f"channel {channel_id} is gone"
    return f"polled {channel.name}"
