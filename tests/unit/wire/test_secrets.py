"""Tests of the Project secrets contract (qinglong.wire.secrets): a set's value is 1 byte to 64 KiB of canonical
base64 and never shows in a repr or an error; the answers carry names, versions and sizes, never a value; one
class per status, dispatched by the family's Variants. Touches nothing. (Its agreement with the SQL results:
tests/integration/shell/test_project_secrets.py, through the shell's own contract check.)
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from qinglong.wire import (
    SECRET_DELETE_RESPONSES,
    SECRET_SET_RESPONSES,
    SecretAlreadyDeleted,
    SecretAlreadySet,
    SecretDeleted,
    SecretDeleteRequest,
    SecretEntry,
    SecretList,
    SecretSet,
    SecretSetRequest,
    WireError,
    encode,
)
from qinglong.wire.common import SECRET_NAME_PATTERN, SECRET_VALUE_MAX_BYTES
from tests.unit.wire.kit import UUID

SCHEMA = "qinglong/secret@v1"
VALUE = b"correct horse battery staple \x00\xff"
ENCODED = base64.b64encode(VALUE).decode()


def set_body(**changes: Any) -> dict[str, Any]:
    return {"schema": SCHEMA, "mutationId": "set-1", "value": ENCODED, **changes}


def refused(body: dict[str, Any]) -> WireError:
    with pytest.raises(WireError) as caught:
        SecretSetRequest.parse(encode(body))
    return caught.value


def test_a_set_carries_the_value_as_canonical_base64_and_hides_it() -> None:
    request = SecretSetRequest.parse(encode(set_body()))
    assert (request.mutation_id, request.value) == ("set-1", VALUE)
    assert SecretSetRequest.field("value").secret
    assert "horse" not in repr(request) and ENCODED not in repr(request)
    assert request.to_obj() == set_body()


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("", "wire.too_short"),  # an empty value
        (base64.b64encode(b"x" * (SECRET_VALUE_MAX_BYTES + 1)).decode(), "wire.too_long"),
        (ENCODED.rstrip("="), "wire.bad_base64"),  # unpadded
        (base64.urlsafe_b64encode(b"\xfb\xff" * 9).decode(), "wire.bad_base64"),  # base64url, not standard
        (ENCODED[:-2] + "!=", "wire.bad_base64"),
        (ENCODED + "\n", "wire.control_character"),
        (ENCODED + " ", "wire.bad_base64"),
        (1234, "wire.bad_type"),
        (None, "wire.bad_type"),
    ],
)
def test_a_bad_value_is_refused_without_echoing_it(value: object, code: str) -> None:
    error = refused(set_body(value=value))
    assert error.code == code
    assert "horse" not in error.message and ENCODED[:12] not in error.message


def test_a_value_of_64_kib_fits_the_request_cap_and_one_byte_more_does_not_parse() -> None:
    full = base64.b64encode(b"\xff" * SECRET_VALUE_MAX_BYTES).decode()
    body = encode(set_body(mutationId="m" * 128, value=full))
    assert len(body) <= SecretSetRequest.CAP
    assert len(SecretSetRequest.parse(body).value) == SECRET_VALUE_MAX_BYTES
    assert SecretSetRequest(mutation_id="m", value=b"\x00").value == b"\x00"  # one byte, any byte
    with pytest.raises(WireError) as caught:
        SecretSetRequest(mutation_id="m", value=b"")
    assert caught.value.code == "wire.too_short"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"mutationId": ""}, "wire.too_short"),
        ({"mutationId": "has space"}, "wire.bad_pattern"),
        ({"mutationId": "m" * 129}, "wire.too_long"),
        ({"name": "DB_PASSWORD"}, "wire.unknown_field"),  # the name is the path's, never the body's
        ({"schema": "qinglong/run-enqueue@v1"}, "wire.bad_schema"),
    ],
)
def test_a_set_refuses_other_fields(changes: dict[str, Any], code: str) -> None:
    assert refused(set_body(**changes)).code == code


def test_a_delete_is_its_mutation_id_alone() -> None:
    assert SecretDeleteRequest.parse(encode({"schema": SCHEMA, "mutationId": "del-1"})).mutation_id == "del-1"
    with pytest.raises(WireError) as caught:
        SecretDeleteRequest.parse(encode({"schema": SCHEMA, "mutationId": "del-1", "value": ENCODED}))
    assert caught.value.code == "wire.unknown_field"


def test_the_set_answers_dispatch_on_status_and_carry_no_value() -> None:
    made = {"status": "set", "name": "DB_PASSWORD", "version": 2, "size": len(VALUE), "setAtMs": 1_767_225_600_000}
    assert isinstance(SECRET_SET_RESPONSES.from_result(made), SecretSet)
    replay = SECRET_SET_RESPONSES.from_result({**made, "status": "already_set"})
    assert isinstance(replay, SecretAlreadySet) and replay.version == 2
    for cls in (SecretSet, SecretAlreadySet):
        assert {f.name for f in cls.FIELDS} == {"status", "name", "version", "size", "setAtMs"}
    with pytest.raises(WireError) as caught:
        SECRET_SET_RESPONSES.from_result({**made, "value": ENCODED})
    assert caught.value.code == "wire.unknown_field"
    with pytest.raises(WireError) as caught:
        SECRET_SET_RESPONSES.from_result({**made, "status": "deleted"})
    assert caught.value.code == "wire.bad_enum"
    with pytest.raises(WireError) as caught:
        SECRET_SET_RESPONSES.from_result({**made, "size": SECRET_VALUE_MAX_BYTES + 1})
    assert caught.value.code == "wire.out_of_range"


def test_the_delete_answers_dispatch_on_status() -> None:
    assert isinstance(SECRET_DELETE_RESPONSES.from_result({"status": "deleted", "name": "A"}), SecretDeleted)
    again = SECRET_DELETE_RESPONSES.from_result({"status": "already_deleted", "name": "A"})
    assert isinstance(again, SecretAlreadyDeleted)


def test_a_list_names_versions_sizes_who_and_when() -> None:
    entry = {"name": "API_KEY", "version": 1, "size": 40, "setBy": "alice", "setAtMs": 5, "createdAtMs": 5}
    listed = SecretList.from_result({"status": "listed", "projectId": UUID, "project": "p", "secrets": [entry]})
    assert listed.secrets == (
        SecretEntry(name="API_KEY", version=1, size=40, set_by="alice", set_at_ms=5, created_at_ms=5),
    )
    with pytest.raises(WireError) as caught:
        SecretList.from_result({"status": "listed", "projectId": UUID, "project": "p",
                                "secrets": [{**entry, "ciphertext": ENCODED}]})  # fmt: skip
    assert caught.value.code == "wire.unknown_field"


@pytest.mark.parametrize(
    ("name", "ok"),
    [("A", True), ("_", True), ("DB_PASSWORD_2", True), ("A" * 64, True), ("A" * 65, False), ("a", False),
     ("2FA", False), ("DB-PASSWORD", False), ("", False), ("DÉ", False)],
)  # fmt: skip
def test_a_secret_name_is_an_environment_variable_name(name: str, ok: bool) -> None:
    assert (re.fullmatch(SECRET_NAME_PATTERN, name) is not None and len(name) <= 64) is ok
    made = {"status": "deleted", "name": name}
    if ok:
        assert SECRET_DELETE_RESPONSES.from_result(made).name == name
    else:
        with pytest.raises(WireError):
            SECRET_DELETE_RESPONSES.from_result(made)
