"""The scheduler comparison behind ``benchmarks/compare.py``: one driver module per
scheduler, the fill/measure harness, and the report (tables and plots).

Nothing here is part of the package; the other schedulers are installed only in the
benchmark environment (``.venv-bench``), and each driver imports them only when called.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Driver
from .cronstore import Cronstore, CronstoreSQLite
from .django_beat import Django
from .redis_beat import RedBeat
from .sqlalchemy_beat import SQLAlchemyBeat


@dataclass(frozen=True)
class Subject:
    """One scheduler under comparison: its driver, what it installs, how results show it."""

    driver: type[Driver]
    #: The name in tables and legends.
    label: str
    #: The module that tells whether the scheduler is installed.
    module: str
    #: Colour and marker in the plots.
    color: str
    marker: str
    #: The distribution whose version the results record, when it is not named ``label``.
    package: str = ""

    @property
    def key(self) -> str:
        return self.driver.key

    @property
    def distribution(self) -> str:
        return self.package or self.label


#: The schedulers by ``--schedulers`` key, in the order of the tables and legends.
SUBJECTS: dict[str, Subject] = {
    subject.key: subject
    for subject in (
        Subject(Cronstore, "celery-cronstore", "celery_cronstore", "tab:green", "o"),
        Subject(
            CronstoreSQLite,
            "celery-cronstore (SQLite)",
            "celery_cronstore",
            "tab:olive",
            "v",
            package="celery-cronstore",
        ),
        Subject(Django, "django-celery-beat", "django_celery_beat", "tab:blue", "s"),
        Subject(
            SQLAlchemyBeat, "sqlalchemy-celery-beat", "sqlalchemy_celery_beat", "tab:orange", "^"
        ),
        Subject(RedBeat, "RedBeat", "redbeat", "tab:red", "D", package="celery-redbeat"),
    )
}

__all__ = ["SUBJECTS", "Driver", "Subject"]
