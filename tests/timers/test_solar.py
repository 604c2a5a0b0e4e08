"""Solar timers (issue 25): the grammar, the almanac, the polar cases, and the same
fires as Celery's own ``solar`` schedule (computed by ``ephem``, another library than
ours) within a minute, for every event, in both hemispheres."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery
from celery.schedules import solar

from celery_cronstore.errors import TimerSyntaxError
from celery_cronstore.timers import SolarTimer, detect_kind, fires, is_valid, parse_timer
from celery_cronstore.timers.solar import EVENTS

UTC = timezone.utc
BERLIN = "52.52 13.405"
TROMSO = "69.65 18.96"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("sunrise 52.52 13.405", "sunrise 52.52 13.405"),
        ("  Sunset   52.520  13.4050 ", "sunset 52.52 13.405"),
        ("dawn -33.8688 151.2093", "dawn_civil -33.8688 151.2093"),
        ("dusk 40.7128 -74.006", "dusk_civil 40.7128 -74.006"),
        ("noon 0 0", "solar_noon 0 0"),
        ("dawn_astronomical -89.5 -180", "dawn_astronomical -89.5 -180"),
    ],
)
def test_canonical_form_round_trips(text: str, canonical: str) -> None:
    timer = parse_timer(text)
    assert (timer.kind, str(timer)) == ("solar", canonical)
    assert parse_timer(str(timer), kind="solar") == timer
    assert detect_kind(text) == "solar"


@pytest.mark.parametrize(
    ("text", "token", "words"),
    [
        ("sunrise 95 13", "95", "latitude must be a number of degrees from -89.5 to 89.5"),
        ("sunrise 90 0", "90", "nearer a pole the sun's day is not defined"),
        ("sunrise 52 181", "181", "longitude must be a number of degrees from -180 to 180"),
        ("sunrise north 13", "north", "latitude"),
        ("sunrise nan 13", "nan", "latitude"),
        ("sunset 52 inf", "inf", "longitude"),
        ("sunrise 52.52", None, "EVENT LATITUDE LONGITUDE"),
        ("sunrise 52.52 13.4 Europe/Berlin", None, "got 4 part(s)"),
    ],
)
def test_bad_expressions_name_the_token(text: str, token: str | None, words: str) -> None:
    with pytest.raises(TimerSyntaxError) as caught:
        parse_timer(text)
    assert isinstance(caught.value, ValueError)
    assert words in str(caught.value)
    assert caught.value.token == token
    assert not is_valid(text)


def test_an_unknown_event_is_refused_when_the_kind_is_solar() -> None:
    with pytest.raises(TimerSyntaxError, match="unknown solar event") as caught:
        parse_timer("moonrise 52 13", kind="solar")
    assert caught.value.token == "moonrise"


def test_berlin_at_the_summer_solstice_matches_the_almanac() -> None:
    # Almanac (timeanddate.com, Berlin, 2026-06-21): sunrise 04:43, sunset 21:33 CEST.
    rise = parse_timer(f"sunrise {BERLIN}").next_after(utc(2026, 6, 20, 12))
    sets = parse_timer(f"sunset {BERLIN}").next_after(utc(2026, 6, 21, 0))
    assert rise is not None
    assert sets is not None
    assert abs(rise - utc(2026, 6, 21, 2, 43)) < timedelta(minutes=1)
    assert abs(sets - utc(2026, 6, 21, 19, 33)) < timedelta(minutes=1)
    assert rise.microsecond == 0


def test_polar_night_and_midnight_sun_skip_to_the_day_the_event_returns() -> None:
    # Tromsø: no sunrise from late November to mid-January, no sunset from late May to
    # late July (the polar night and the midnight sun).
    rise = parse_timer(f"sunrise {TROMSO}")
    after_dark = rise.next_after(utc(2026, 12, 6))
    assert after_dark is not None
    assert utc(2027, 1, 14) < after_dark < utc(2027, 1, 18)
    last = rise.last_at_or_before(utc(2026, 12, 6))
    assert last is not None
    assert utc(2026, 11, 24) < last < utc(2026, 11, 28)
    sunset = parse_timer(f"sunset {TROMSO}").next_after(utc(2026, 6, 1))
    assert sunset is not None
    assert utc(2026, 7, 24) < sunset < utc(2026, 7, 28)
    # Berlin's sky never gets astronomically dark around midsummer.
    dark = parse_timer(f"dawn_astronomical {BERLIN}").next_after(utc(2026, 6, 21))
    assert dark is not None
    assert utc(2026, 7, 10) < dark < utc(2026, 8, 1)
    # Half a degree from the North Pole: the half-year night, then sunrise near the
    # March equinox (a search of 170 days).
    pole = parse_timer("sunrise 89.5 0").next_after(utc(2026, 10, 1))
    assert pole is not None
    assert utc(2027, 3, 10) < pole < utc(2027, 3, 25)


@pytest.mark.parametrize("event", sorted(EVENTS))
@pytest.mark.parametrize(
    "place",
    ["52.52 13.405", "-33.8688 151.2093", "40.7128 -74.006", "64.1466 -21.9426"],
    ids=["berlin", "sydney", "new-york", "reykjavik"],
)
def test_the_same_fires_as_celerys_own_solar_schedule(event: str, place: str) -> None:
    latitude, longitude = (float(p) for p in place.split())
    app = Celery(set_as_current=False)
    app.conf.timezone = "UTC"
    timer = parse_timer(f"{event} {place}")
    start = utc(2026, 3, 1, 12)
    ours = list(fires(timer, start, limit=20))
    assert ours == sorted(ours)
    assert len(ours) == len(set(ours))
    theirs: list[datetime] = []
    now = start
    while len(theirs) < len(ours):  # Celery's own chain: each next event after the last
        at = now
        schedule = solar(event, latitude, longitude, app=app, nowfun=lambda at=at: at)
        found = now + schedule.remaining_estimate(now)
        theirs.append(found)
        now = found + timedelta(minutes=2)
    for mine, celerys in zip(ours, theirs, strict=True):
        assert abs(celerys - mine) < timedelta(minutes=1), (event, place, mine, celerys)


def test_last_at_or_before_agrees_with_next_after() -> None:
    timer = parse_timer(f"dusk {BERLIN}")
    moment = utc(2026, 10, 25, 23)
    last = timer.last_at_or_before(moment)
    assert last is not None
    assert last <= moment
    assert timer.next_after(last) == timer.next_after(moment)
    assert timer.count_between(utc(2026, 10, 1), utc(2026, 10, 31), limit=100) == 30


def test_the_zone_changes_nothing_and_it_describes_itself() -> None:
    here = parse_timer(f"sunrise {BERLIN}", tz="Europe/Berlin")
    assert isinstance(here, SolarTimer)
    anywhere = parse_timer(f"sunrise {BERLIN}", tz="Pacific/Auckland")
    start = utc(2026, 3, 1)
    assert list(fires(here, start, limit=5)) == list(fires(anywhere, start, limit=5))
    assert here.describe() == "at sunrise at 52.52°N 13.405°E"
    assert parse_timer("dusk_nautical -33.9 -70.6").describe() == (
        "at dusk nautical at 33.9°S 70.6°W"
    )
