"""Tests of completion and artifact upload (qinglong.wire.completion). Touches nothing."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest

from qinglong.wire import WireError, encode
from qinglong.wire.completion import (
    ARTIFACT_MAX_BYTES,
    UPLOAD_CAP,
    ArtifactUploadRequest,
    CompletionRequest,
)
from tests.unit.wire.kit import (
    TOKEN,
    UUID,
)
from tests.unit.wire.test_activation import fence

SCHEMA = "qinglong/remote-run-completion@v1"


def completion(**changes: Any) -> dict[str, Any]:
    return {
        **fence(schema=SCHEMA),
        "leaseVersion": 3,
        "exitCode": 0,
        "errorCode": None,
        "artifacts": [],
        **changes,
    }


def upload(content: bytes, **changes: Any) -> dict[str, Any]:
    return {
        **fence(schema=SCHEMA),
        "kind": "log",
        "sha256": hashlib.sha256(content).hexdigest(),
        "size": len(content),
        "contentBase64": base64.b64encode(content).decode(),
        **changes,
    }


def code_of(cls: type[Any], obj: dict[str, Any]) -> str:
    with pytest.raises(WireError) as caught:
        cls.from_obj(obj)
    return str(caught.value.code)


def test_a_completion_needs_an_exit_code_or_an_error_code() -> None:
    assert CompletionRequest.from_obj(completion()).exit_code == 0
    assert CompletionRequest.from_obj(completion(exitCode=None, errorCode="killed")).error_code == "killed"
    assert CompletionRequest.from_obj(completion(exitCode=137, errorCode="signal.kill")).exit_code == 137
    assert code_of(CompletionRequest, completion(exitCode=None)) == "wire.missing_field"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"exitCode": 256}, "wire.out_of_range"),
        ({"exitCode": -1}, "wire.out_of_range"),
        ({"errorCode": "A"}, "wire.bad_pattern"),
        ({"errorCode": ""}, "wire.too_short"),
        ({"leaseVersion": 0}, "wire.out_of_range"),
        ({"artifacts": [{"artifactId": UUID, "sha256": "a" * 64, "size": 1}] * 3}, "wire.too_long"),
        ({"artifacts": [{"artifactId": UUID, "sha256": "a" * 63, "size": 1}]}, "wire.too_short"),
        ({"artifacts": [{"artifactId": UUID, "sha256": "g" * 64, "size": 1}]}, "wire.bad_pattern"),
        (
            {"artifacts": [{"artifactId": UUID, "kind": "log", "sha256": "a" * 64, "size": 1}]},
            "wire.unknown_field",
        ),
        (
            {"artifacts": [{"artifactId": UUID, "sha256": "a" * 64, "size": ARTIFACT_MAX_BYTES + 1}]},
            "wire.out_of_range",
        ),
        ({"offerId": UUID}, "wire.unknown_field"),
    ],
)
def test_completion_bounds(changes: dict[str, Any], code: str) -> None:
    assert code_of(CompletionRequest, completion(**changes)) == code


def test_an_upload_carries_bytes_as_canonical_base64_and_hides_them_from_repr() -> None:
    content = b"hello \x00 world"
    msg = ArtifactUploadRequest.from_obj(upload(content))
    assert msg.content == content and msg.size == len(content)
    assert "hello" not in repr(msg) and TOKEN not in repr(msg)
    assert ArtifactUploadRequest.parse(msg.to_json()) == msg
    assert code_of(ArtifactUploadRequest, upload(content, contentBase64="aGVsbG8")) == "wire.bad_base64"
    assert code_of(ArtifactUploadRequest, upload(content, contentBase64="aGVsbG9=")) == "wire.bad_base64"
    assert code_of(ArtifactUploadRequest, upload(content, contentBase64="aGVs bG8=")) == "wire.bad_base64"
    assert code_of(ArtifactUploadRequest, upload(content, contentBase64="aGVs-G8=")) == "wire.bad_base64"
    assert code_of(ArtifactUploadRequest, upload(content, kind="core")) == "wire.bad_enum"


def test_the_largest_artifact_fits_the_upload_cap_and_one_byte_more_does_not() -> None:
    content = bytes(ARTIFACT_MAX_BYTES)
    body = encode(upload(content))
    assert len(body) <= UPLOAD_CAP == 1536 * 1024
    assert ArtifactUploadRequest.parse(body).size == ARTIFACT_MAX_BYTES
    with pytest.raises(WireError) as caught:
        ArtifactUploadRequest.parse(encode(upload(content + b"\x00", size=ARTIFACT_MAX_BYTES)))
    assert caught.value.code == "wire.too_long"
    with pytest.raises(WireError) as caught:
        ArtifactUploadRequest.parse(b" " * (UPLOAD_CAP + 1))
    assert caught.value.code == "wire.too_large"


def test_size_and_digest_agreement_is_the_database_s_check() -> None:
    # The wire checks shapes; sha256(content) and len(content) are checked by ql_api.artifact_upload_v1
    # (invalid.size, invalid.sha256_mismatch), so a mismatch still parses here.
    msg = ArtifactUploadRequest.from_obj(upload(b"abc", size=4, sha256="0" * 64))
    assert msg.size == 4
