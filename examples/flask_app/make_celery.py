"""The Celery app of the Flask example: ``celery -A examples.flask_app.make_celery worker -B``."""

from examples.flask_app.app import create_app

flask_app = create_app()
celery_app = flask_app.extensions["celery"]
