"""Example applications for celery-cronstore."""
