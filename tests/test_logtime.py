"""Event time: the time each format's lines state, year-less stamps, and lines without a time."""

from __future__ import annotations

import calendar
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logmetrics.records.logtime import _STAMP, HEAD, LogClock, epoch_number, parse_time

MTIME = calendar.timegm((2024, 4, 12, 0, 0, 0))  # the files' modification time in these tests
T = calendar.timegm((2024, 4, 10, 3, 30, 0))  # 2024-04-10T03:30:00Z, the time most examples state

# (line, the time it states) -- checked by hand against each format's documentation
EXAMPLES = [
    ("2024-04-10T03:30:00.000000123Z stdout F INFO 04-10 01:00:00 [x.py:1] hi", T + 123e-9),  # CRI: the envelope
    ('{"log":"INFO 04-10 01:00:00 [x.py:1] hi\\n","stream":"stderr","time":"2024-04-10T03:30:00.5Z"}', T + 0.5),
    ("2024-04-10T05:30:00+02:00 INFO 04-10 05:30:00 [api_server.py:1] up", T),  # docker logs -t, with an offset
    ("INFO 04-10 03:30:00 [loggers.py:80] Engine 000: Avg prompt throughput: 1.0 tokens/s", T),  # vLLM
    ("(APIServer pid=1) \x1b[32mINFO\x1b[0m 04-10 03:30:00 [x.py:1] y", None),  # colours left on: no stamp
    ("(APIServer pid=1) INFO 04-10 03:30:00 [api_server.py:1] up", T),
    ("2024-04-10 03:30:00.123 UTC [1] LOG:  database system is ready to accept connections", T + 0.123),  # Postgres
    ("[2024-04-10 03:30:00 +0000] [1] [INFO] Starting gunicorn 22.0.0", T),
    ("2024-04-10 03:30:00,250 | INFO | main.py:1 >>> up", T + 0.25),  # Python logging, no zone: UTC here
    ('10.0.0.1 - - [10/Apr/2024:03:30:00 +0000] "GET / HTTP/1.1" 200 1', T),  # common log format
    ("2024/04/10 03:30:00 [notice] 1#0: start worker processes", T),  # nginx
    ("Apr 10 03:30:00 host vllm[12]: INFO started", T),  # syslog / journald
    ('{"timestamp":1712719800,"level":"INFO","message":"request"}', T),  # llama.cpp JSON, seconds
    ('{"ts":1712719800250,"msg":"x"}', T + 0.25),  # milliseconds
    ('{"level":30,"time":1712719800000,"msg":"x"}', T),  # pino
    ('{"@timestamp":"2024-04-10T03:30:00Z","message":"x"}', T),
    ('INFO [  main] build info | tid="1" timestamp=1712719800 build=3590', T),  # llama.cpp Era C text
    ('time="2024-04-10T03:30:00Z" level=fatal msg="running db migrations"', T),  # logfmt
    ("0.08.526.747 I srv  llama_server: model loaded", None),  # llama.cpp: time since start, no time of day
    ("srv  update_slots: all slots are idle", None),
    ("10:00:00.100 [info] Migrations already up", None),  # a time of day alone
    ("INFO:     127.0.0.1:8080 - \"GET /health HTTP/1.1\" 200 OK", None),
    ('{"timestamp": 42, "level": "x"}', None),  # a number too small to be a time
    ("INFO 13-40 03:30:00 [x.py:1] month 13", None),
    ("2024-02-30T00:00:00Z no such day", None),
    ("", None),
]


@pytest.mark.parametrize(("line", "want"), EXAMPLES)
def test_each_format_states_its_time(line: str, want: float | None) -> None:
    """Hand-checked examples, one or more per format."""
    got = LogClock(MTIME, UTC).stated(line)
    assert got == (pytest.approx(want, abs=1e-6) if want is not None else None)


def test_a_stamp_without_a_zone_is_in_the_zone_given() -> None:
    """vLLM's stamps are the local time of the machine that wrote them: --timezone says which."""
    line = "INFO 04-10 05:30:00 [x.py:1] y"
    assert LogClock(MTIME, ZoneInfo("Europe/Berlin")).stated(line) == T  # CEST, UTC+2
    assert LogClock(MTIME, UTC).stated(line) == T + 7200


def test_the_year_of_vllm_stamps_follows_the_files_mtime_across_new_year() -> None:
    """A log whose months go 12 -> 01 moves to the next year; the first stamp is not after the mtime."""
    clock = LogClock(calendar.timegm((2025, 1, 1, 1, 0, 0)), UTC)
    times = [clock.time(f"INFO {stamp} [x.py:1] y") for stamp in ("12-31 23:59:58", "12-31 23:59:59", "01-01 00:00:01")]
    assert times == [calendar.timegm((2024, 12, 31, 23, 59, 58)), calendar.timegm((2024, 12, 31, 23, 59, 59)),
                     calendar.timegm((2025, 1, 1, 0, 0, 1))]
    later = LogClock(calendar.timegm((2024, 3, 1, 0, 0, 0)), UTC)  # April stamps in a file last written in March
    assert later.stated("INFO 04-10 03:30:00 [x.py:1] y") == calendar.timegm((2023, 4, 10, 3, 30, 0))


def test_lines_without_a_time_take_the_last_one() -> None:
    """Before any stamp, the mtime (backfill: the first stamp found later); after one, the last one."""
    clock = LogClock(MTIME, UTC)
    assert clock.time("Traceback (most recent call last):") == MTIME
    assert clock.time("INFO 04-10 03:30:00 [x.py:1] y") == T
    assert clock.time('  File "x.py", line 1') == T
    assert clock.peek("INFO 04-10 03:31:00 [x.py:1] y") == T + 60 and clock.last == T, "peek commits nothing"


@given(st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1)),
       st.sampled_from(["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M:%S UTC", "[%Y-%m-%d %H:%M:%S +0000]",
                        "%d/%b/%Y:%H:%M:%S +0000", "%Y/%m/%d %H:%M:%S"]))
def test_stamps_round_trip(when: datetime, fmt: str) -> None:
    """Any time written in a format with a year reads back as that time (whole seconds)."""
    when = when.replace(microsecond=0, tzinfo=UTC)
    line = when.strftime(fmt) + " INFO something happened"
    assert LogClock(MTIME, UTC).stated(line) == when.timestamp()


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)), st.integers(0, 300 * 86400))
def test_yearless_stamps_round_trip_within_a_year_of_the_mtime(when: datetime, before: int) -> None:
    """A vLLM or syslog stamp less than a year before the mtime reads back with its year."""
    when = when.replace(microsecond=0, tzinfo=UTC)
    mtime = (when + timedelta(seconds=before)).timestamp()
    for fmt in ("INFO %m-%d %H:%M:%S [x.py:1] y", "%b %d %H:%M:%S host unit[1]: y"):
        assert LogClock(mtime, UTC).stated(when.strftime(fmt)) == when.timestamp(), fmt


@given(st.text(alphabet="0123456789:-/ .,TZ+INFOWARNCRITApr<>[]x", max_size=80),
       st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)),
       st.sampled_from(["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d %H:%M:%S", "INFO %m-%d %H:%M:%S", "CRITICAL %m-%d %H:%M:%S",
                        "%d/%b/%Y:%H:%M:%S +0000", "%Y/%m/%d %H:%M:%S", "%b %d %H:%M:%S"]),
       st.text(alphabet="0123456789: x", max_size=40))
def test_the_stamp_found_is_the_first_in_the_line(lead: str, when: datetime, fmt: str, tail: str) -> None:
    """Digits, colons and clock times before a stamp: the time read is that of the stamp a search of
    the whole head of the line finds first (the quick look for a time of day finds the same)."""
    line = "x" + lead + when.strftime(fmt) + tail
    clock = LogClock(MTIME, UTC)
    m = _STAMP.search(line[:HEAD])
    assert clock.peek(line) == (LogClock(MTIME, UTC)._stamp(m) if m is not None else None)


@given(st.text(max_size=300))
def test_never_raises(line: str) -> None:
    """Any text: a time of this era, or None."""
    got = LogClock(MTIME).stated(line)
    assert got is None or 0 < got < 4102444800


@given(st.integers(10**9, 4 * 10**9))
def test_epoch_units_are_told_apart(seconds: int) -> None:
    """Seconds, milliseconds, microseconds and nanoseconds of one time are that time."""
    for scale in (1, 1000, 10**6, 10**9):
        assert epoch_number(float(seconds * scale)) == pytest.approx(seconds)


def test_parse_time_takes_rfc3339_and_unix_seconds() -> None:
    """--start and --end: RFC 3339 with or without a zone, or Unix seconds; None otherwise."""
    assert parse_time("2024-04-10T03:30:00Z") == T
    assert parse_time("2024-04-10T05:30:00+02:00") == T
    assert parse_time("2024-04-10T03:30:00", UTC) == T
    assert parse_time(str(T)) == T
    assert parse_time("yesterday") is None


def test_an_indented_line_states_no_time() -> None:
    """A field of a JSON object printed over lines, or a frame, is data: its time is not the record's."""
    clock = LogClock(0.0, UTC)
    assert clock.peek('  "time": "2026-09-09T12:20:00.000Z",') is None
    assert clock.peek('\t"timestamp": 1788948000') is None
    assert clock.peek('  {"time": "2026-09-09T12:20:00.000Z", "msg": "x"}') == 1788956400.0
    assert clock.peek('2026-09-09T12:20:00.000Z {"msg": "x"}') == 1788956400.0


@pytest.mark.parametrize("fmt", ["INFO %m-%d %H:%M:%S [x.py:1] served",
                                 "%Y-%m-%d %H:%M:%S,250 | INFO | main.py:1 >>> up"])
def test_the_hour_that_repeats_when_clocks_go_back_is_read_twice_in_order(fmt: str) -> None:
    """A log in local time without an offset runs through the hour that repeats in autumn, a line a
    minute: its second 02:xx is an hour after the first, not the same times again; a line a little
    earlier than the one before it (a stray) stays a little earlier."""
    berlin = ZoneInfo("Europe/Berlin")
    utc = [datetime(2026, 10, 25, 0, 0, tzinfo=UTC) + timedelta(minutes=m) for m in range(121)]
    clock = LogClock(datetime(2026, 10, 26, tzinfo=UTC).timestamp(), berlin)
    frac = 0.25 if "%Y" in fmt else 0.0
    assert [clock.stated(w.astimezone(berlin).strftime(fmt)) for w in utc] == [w.timestamp() + frac for w in utc]
    stray = (utc[-1] - timedelta(minutes=3)).astimezone(berlin).strftime(fmt)  # 02:57 of the second hour
    assert clock.stated(stray) == utc[-1].timestamp() - 180 + frac


def test_the_hour_that_clocks_skip_in_spring_reads_as_before() -> None:
    """A stamp in the hour that does not exist (02:30 on the last Sunday of March) reads at the
    offset before the change, as before, even after a later time."""
    berlin = ZoneInfo("Europe/Berlin")
    clock = LogClock(datetime(2026, 3, 30, tzinfo=UTC).timestamp(), berlin)
    assert clock.stated("INFO 03-29 03:10:00 [x.py:1] a") == datetime(2026, 3, 29, 1, 10, tzinfo=UTC).timestamp()
    assert clock.stated("INFO 03-29 02:30:00 [x.py:1] b") == datetime(2026, 3, 29, 1, 30, tzinfo=UTC).timestamp()
