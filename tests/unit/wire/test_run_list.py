"""Tests of qinglong/run-list@v1 (qinglong.wire.run_list) and of query strings parsed by the field engine
(qinglong.wire.query): every valid query round-trips through its query string; every refusal has the code a
body's field would get and never echoes the value; the answer's messages round-trip and refuse every
mutation. Touches nothing."""

from __future__ import annotations

import contextlib
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.wire import Record, RunList, RunListQuery, RunSummary, WireError
from qinglong.wire.fields import Int, Str, wire
from qinglong.wire.query import Query
from tests.unit.wire.kit import (
    FAST,
    UUID,
    records,
)

CURSOR = "AAABm3baqADgAAAAAABAAIAAAAAAAAAG"


@FAST
@given(query=records(RunListQuery))
def test_every_valid_query_round_trips_through_its_query_string(query: RunListQuery) -> None:
    assert RunListQuery.parse(query.to_query()) == query


def test_parameters_load_as_their_declared_types() -> None:
    query = RunListQuery.parse(f"taskId={UUID}&status=failed&sinceMs=0&untilMs=1767225600000&limit=100&cursor={CURSOR}")
    assert query == RunListQuery(
        task_id=UUID, status="failed", since_ms=0, until_ms=1_767_225_600_000, limit=100, cursor=CURSOR
    )
    assert RunListQuery.parse("") == RunListQuery()
    assert RunListQuery().to_query() == ""
    assert RunListQuery.parse("status=timed%5Fout").status == "timed_out", "values are percent-decoded"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("page=2", "wire.unknown_field"),
        ("status=failed&status=queued", "wire.duplicate_key"),
        ("limit=1&limit=1", "wire.duplicate_key"),
        ("status=finished", "wire.bad_enum"),
        ("status=", "wire.bad_enum"),
        ("status=FAILED", "wire.bad_enum"),
        ("limit=0", "wire.out_of_range"),
        ("limit=101", "wire.out_of_range"),
        ("sinceMs=-1", "wire.out_of_range"),
        ("untilMs=9007199254740992", "wire.out_of_range"),
        ("limit=05", "wire.bad_type"),
        ("limit=+5", "wire.bad_type"),
        ("limit=1e2", "wire.bad_type"),
        ("limit=", "wire.bad_type"),
        ("limit=%201", "wire.bad_type"),
        ("taskId=" + UUID.upper(), "wire.bad_uuid"),
        ("taskId=42", "wire.bad_uuid"),
        ("cursor=short", "wire.too_short"),
        ("cursor=" + CURSOR + "A", "wire.too_long"),
        ("cursor=" + CURSOR[:-1] + "%2B", "wire.bad_pattern"),
        ("cursor=" + CURSOR[:-1] + "%00", "wire.control_character"),
        ("status", "wire.bad_type"),
        ("status=failed&&limit=1", "wire.bad_type"),
        ("status=%FF", "wire.bad_type"),
        ("status=failed;limit=1", "wire.bad_enum"),
        ("x=" + "a" * 1030, "wire.too_long"),
    ],
)
def test_a_bad_query_is_refused_with_the_code_a_body_field_gets(raw: str, code: str) -> None:
    with pytest.raises(WireError) as caught:
        RunListQuery.parse(raw)
    assert caught.value.code == code
    assert caught.value.message.startswith("query")


def test_a_refusal_names_the_parameter_never_its_value() -> None:
    secret = "s3cr3t-value-XYZ"  # noqa: S105 - a value that must not be echoed
    for raw in (f"{secret}=1", f"status={secret}", f"cursor={secret}", f"status=a&{secret}=1&{secret}=2"):
        with pytest.raises(WireError) as caught:
            RunListQuery.parse(raw)
        assert secret not in caught.value.message, raw
    with pytest.raises(WireError) as caught:
        RunListQuery.parse(urllib.parse.urlencode({"wéird name": "1"}))
    assert "(name not shown)" in caught.value.message


@FAST
@given(raw=st.text(max_size=200))
def test_arbitrary_query_strings_raise_only_wire_errors(raw: str) -> None:
    with contextlib.suppress(WireError):
        RunListQuery.parse(raw)


def test_a_query_declares_only_optional_strings_and_integers() -> None:
    with pytest.raises(TypeError):

        class Required(Query):
            limit: int = wire(Int(1, 10))

    with pytest.raises(TypeError):

        class Nullable(Query):
            name: str | None = wire(Str(8), nullable=True)

    class Fine(Query):
        name: str | None = wire(Str(8), optional=True, default=None)

    assert Fine.parse("name=abc").name == "abc"
    assert issubclass(Fine, Record)


def test_the_listed_answer_is_the_database_result() -> None:
    row = {
        "runId": UUID,
        "taskId": UUID,
        "taskName": "backup",
        "status": "succeeded",
        "attemptCount": 2,
        "createdAtMs": 1,
        "startedAtMs": 2,
        "endedAtMs": 3,
        "exitCode": 0,
        "cancelReason": None,
    }
    listed = RunList.from_result({"status": "listed", "runs": [row], "nextCursor": None})
    assert listed.runs == (RunSummary.from_obj(row),) and listed.next_cursor is None
    assert RunList.parse(listed.to_json()) == listed
    for bad in ({**row, "exitCode": 256}, {**row, "taskName": ""}, {**row, "attemptCount": 101}, {**row, "extra": 1}):
        with pytest.raises(WireError):
            RunList.from_result({"status": "listed", "runs": [bad], "nextCursor": None})
    with pytest.raises(WireError, match="too_long"):
        RunList.from_result({"status": "listed", "runs": [row] * 101, "nextCursor": CURSOR})


def test_a_full_page_of_the_longest_rows_fits_the_cap() -> None:
    longest = RunSummary(
        run_id=UUID,
        task_id=UUID,
        task_name="t" * 128,
        status="waiting_approval",
        attempt_count=100,
        created_at_ms=2**53 - 1,
        started_at_ms=2**53 - 1,
        ended_at_ms=2**53 - 1,
        exit_code=255,
        cancel_reason="reconcile",
    )
    assert len(RunList(runs=(longest,) * 100, next_cursor=CURSOR).to_json()) <= RunList.CAP
