from django.apps import AppConfig


class MailChannelsConfig(AppConfig):
    name = "mailchannels"

    def ready(self) -> None:
        from mailsite.celery import get_store

        from celery_cronstore.contrib.django import tie_owner

        # Deleting a channel removes its periodic tasks once the delete commits. The store
        # is a function: nothing connects until the first release.
        tie_owner(self.get_model("MailChannel"), "mail_channel", store=get_store)
