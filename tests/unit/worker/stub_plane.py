"""A stand-in for the control plane at the Worker's client boundary, for unit tests only: `StubPlane` is an
IngressClient whose calls are answered by a model of one Attempt as the database keeps it (the start barrier,
replays, Lease versions, output streams with their head and tail caps in the units of what was shipped, the
completion) and by the secrets the starting ACK delivers. It records every call and can fail the next calls of
a kind (no answer). Everything else the Worker does stays real: journal, Executor, processes, files.
Touches nothing (no network).
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from qinglong.wire import (
    ActivationRequest,
    ActivationResponse,
    ActivationStartFailureRequest,
    CompletionRequest,
    CompletionResponse,
    LeaseControlRequest,
    LeaseControlResponse,
    OfferEmpty,
    OfferOffered,
    OfferResponse,
    OutputAppended,
    OutputAppendRequest,
    OutputLost,
    OutputLostRequest,
    WorkerSessionAlive,
)
from qinglong.wire.activation import ActivationStatus, DeliveredSecret, Executor, Snapshot
from qinglong.wire.lease_control import LeaseRenewed, LeaseTerminal
from qinglong.wire.offer import Offer, Plan
from qinglong.worker.client import Credentials, IngressClient, Session, TransportError

AttemptStatus = Literal["claimed", "starting", "running", "succeeded", "failed"]


class _NoCredentials:
    def load(self) -> Credentials:
        raise AssertionError("the stub plane opens no connection")


def lease_token() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def offered(plan: Plan, *, lease_ms: int = 60_000) -> OfferOffered:
    at = now_ms()
    offer = Offer(
        offer_id=str(uuid.uuid4()),
        project_id=str(uuid.uuid4()),
        run_id=str(uuid.uuid4()),
        attempt_id=str(uuid.uuid4()),
        attempt_no=1,
        lease_generation=1,
        lease_version=1,
        offered_at_ms=at,
        lease_expires_at_ms=at + lease_ms,
        offer_expires_at_ms=at + lease_ms,
        plan=plan,
    )
    return OfferOffered(offer=offer, lease_token=lease_token())


@dataclass
class Stream:
    """One output stream as the database keeps it (ql_api.output_append_v1's rules): a replay stores only the
    new suffix, a jump past nextOffset only once the head is held."""

    head: int
    tail: int
    next_offset: int = 0
    kept: dict[int, bytes] = field(default_factory=dict)

    def append(self, offset: int, data: bytes) -> None:
        if offset > self.next_offset and self.next_offset < self.head:
            raise AssertionError(f"a gap before the head: {offset} > {self.next_offset}")
        if offset < self.next_offset:
            data, offset = data[self.next_offset - offset :], self.next_offset
        if data:
            self.kept[offset] = data
            self.next_offset = offset + len(data)

    def whole(self) -> bytes:
        """The kept bytes in order, when they are contiguous from 0 (AssertionError otherwise)."""
        out = b""
        for offset in sorted(self.kept):
            assert offset == len(out), f"a gap or an overlap at {offset} ({len(out)} held)"
            out += self.kept[offset]
        return out


@dataclass
class Call:
    name: str
    body: Any


class StubPlane(IngressClient):
    """One offer's Attempt, answered like the database would (see the module docstring)."""

    def __init__(self, offer: OfferOffered, secrets: Mapping[str, bytes], *, head: int = 1 << 20, tail: int = 1 << 20):
        super().__init__("https://stub.invalid", str(uuid.uuid4()), _NoCredentials())
        self.offer = offer
        self.secrets = dict(secrets)  # what a starting ACK delivers now (delete one to model a deleted secret)
        self.status: AttemptStatus = "claimed"
        self.error_code: str | None = None
        self.exit_code: int | None = None
        self.lease_version = offer.offer.lease_version
        self.streams = {"stdout": Stream(head, tail), "stderr": Stream(head, tail)}
        self.calls: list[Call] = []
        self.fail: dict[str, int] = {}  # call name → how many of its next calls get no answer
        self.after: Callable[[str], None] | None = None  # runs after each answered call, with its name
        self.terminal = False  # lease control answers `terminal` (the Attempt ended elsewhere)
        self.ttl_ms = 60_000  # what a renewal grants
        self.pulled = False

    def names(self) -> list[str]:
        return [c.name for c in self.calls]

    def _record(self, name: str, body: Any = None) -> None:
        self.calls.append(Call(name, body))
        if self.fail.get(name, 0) > 0:
            self.fail[name] -= 1
            raise TransportError("stub: no answer")

    def _answered(self, name: str) -> None:
        if self.after is not None:
            self.after(name)

    def snapshot(self) -> Snapshot:
        o = self.offer.offer
        at = now_ms()
        timeout = o.plan.timeout_ms
        return Snapshot(
            project_id=o.project_id, run_id=o.run_id, attempt_id=o.attempt_id, offer_id=o.offer_id,
            attempt_no=1, run_status=self._run_status(),
            attempt_status=self.status, attempt_version=1, lease_generation=1, lease_version=self.lease_version,
            lease_expires_at_ms=at + 60_000, callback_sequence=0,
            deadline_at_ms=None if timeout is None else at + timeout, started_at_ms=None, running_at_ms=None,
            ended_at_ms=None, exit_code=self.exit_code, error_code=self.error_code, cancel_requested_at_ms=None,
            cancel_reason=None, executor=Executor(kind="process", version=1), artifacts=(),
        )  # fmt: skip

    def _run_status(self) -> Literal["queued", "running", "succeeded", "failed"]:
        if self.status == "claimed":
            return "queued"
        if self.status in ("starting", "running"):
            return "running"
        return "succeeded" if self.status == "succeeded" else "failed"

    def _delivered(self) -> tuple[DeliveredSecret, ...] | None:
        if not self.secrets:
            return None
        return tuple(DeliveredSecret(name=n, version=1, value=v) for n, v in sorted(self.secrets.items()))

    async def open_session(self, *, capacity: int, generation: int) -> Session:
        self._record("open")
        return Session(str(uuid.uuid4()), generation, b"k" * 32, now_ms() + 60_000)

    async def heartbeat(self, session: Session) -> WorkerSessionAlive:
        self._record("heartbeat")
        return WorkerSessionAlive(session_id=session.session_id, expires_at_ms=now_ms() + 60_000)

    async def pull(self, session: Session, pull_id: str) -> OfferResponse:
        self._record("pull")
        if self.pulled:
            return OfferEmpty(reason="no_work")
        self.pulled = True
        return self.offer

    async def activate(
        self,
        session: Session,
        offer_id: str,
        phase: Literal["starting", "running", "start-failure"],
        body: ActivationRequest | ActivationStartFailureRequest,
    ) -> ActivationResponse:
        self._record(phase, body)
        try:
            return self._activation(phase, body)
        finally:
            self._answered(phase)

    def _activation(
        self,
        phase: Literal["starting", "running", "start-failure"],
        body: ActivationRequest | ActivationStartFailureRequest,
    ) -> ActivationResponse:
        if self.status in ("succeeded", "failed"):
            return ActivationResponse(status="already_terminal", snapshot=self.snapshot())
        if phase == "starting":
            if self.status == "claimed":
                self.status = "starting"
                return ActivationResponse(status="applied", snapshot=self.snapshot(), secrets=self._delivered())
            replayed: ActivationStatus = "already_starting" if self.status == "starting" else "already_running"
            return ActivationResponse(status=replayed, snapshot=self.snapshot(), secrets=self._delivered())
        if phase == "running":
            if self.status == "running":
                return ActivationResponse(status="already_running", snapshot=self.snapshot())
            self.status = "running"
            return ActivationResponse(status="applied", snapshot=self.snapshot())
        assert isinstance(body, ActivationStartFailureRequest)
        self.status, self.error_code = "failed", body.error_code
        return ActivationResponse(status="applied", snapshot=self.snapshot())

    async def lease_control(
        self, session: Session, body: LeaseControlRequest, *, timeout_s: float | None = None
    ) -> LeaseControlResponse:
        self._record("lease-control", body)
        at = now_ms()
        if self.terminal:
            self.status = "failed"
            return LeaseTerminal(run_status="failed", attempt_status="failed", exit_code=None, error_code="x.ended",
                                 ended_at_ms=at)  # fmt: skip
        assert body.expected_version == self.lease_version, (body.expected_version, self.lease_version)
        self.lease_version += 1
        if body.running and self.status == "starting":
            self.status = "running"  # the running ACK taken along
        return LeaseRenewed(lease_version=self.lease_version, renewed_at_ms=at, expires_at_ms=at + self.ttl_ms,
                            deadline_at_ms=None)  # fmt: skip

    async def append_output(
        self, session: Session, offer_id: str, body: OutputAppendRequest, *, timeout_s: float | None = None
    ) -> OutputAppended:
        self._record("output", body)
        stream = self.streams[body.stream]
        stream.append(body.offset, body.data)
        return OutputAppended(stream=body.stream, next_offset=stream.next_offset, head_bytes=stream.head,
                              tail_bytes=stream.tail)  # fmt: skip

    async def output_lost(self, session: Session, offer_id: str, body: OutputLostRequest) -> OutputLost:
        self._record("output-lost", body)
        stored = self.streams[body.stream].next_offset
        return OutputLost(status="recorded", stream=body.stream, written_bytes=body.written_bytes, stored_bytes=stored)

    async def complete(self, session: Session, offer_id: str, body: CompletionRequest) -> CompletionResponse:
        self._record("completion", body)
        self.exit_code, self.error_code = body.exit_code, body.error_code
        self.status = "succeeded" if body.exit_code == 0 else "failed"
        return CompletionResponse(status="completed", run_status=self.status, attempt_status=self.status,
                                  snapshot=self.snapshot())  # fmt: skip

    def shipped(self, stream: str = "stdout") -> list[bytes]:
        """Every chunk of `stream` the Worker sent, in order."""
        return [c.body.data for c in self.calls if c.name == "output" and c.body.stream == stream]
