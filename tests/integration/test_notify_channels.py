"""The notification channels on real parts, without a database: the webhook signature a receiver verifies (its
window, its key, its body), and the dispatcher's delivery (qinglong.shell.notify.Dispatcher.deliver) to a WeCom
robot endpoint served on loopback by aiohttp, with the robot key opened from a sealed secret by the shell's Sealer:
the key travels only as the robot's query parameter, a non-zero errcode is a failure code, a deleted or tampered
secret is a code and no request. Egress: a receiver on loopback or link-local, named by its address or by a name
that resolves there, is refused (`egress.refused`, no request) unless `loopback_receivers` allows it.
Touches: a loopback port.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from qinglong.shell import notify_format
from qinglong.shell.notify import Dispatcher, NotifyConfig, receivable
from qinglong.shell.sealing import Sealer

KEY = b"wecom-robot-key-0123456789abcdef"
PROJECT = str(uuid.uuid4())


def sealed_item(sealer: Sealer, value: bytes, **changes: Any) -> dict[str, Any]:
    """A claimed notification as ql_api.notify_claim_v1 answers it, its secret sealed for the Project."""
    version_id = str(uuid.uuid4())
    s = sealer.seal(value, project_id=PROJECT, name="ROBOT_KEY", version_id=version_id)
    b64 = base64.b64encode
    item: dict[str, Any] = {
        "id": str(uuid.uuid4()), "attemptNo": 1, "kind": "run.failed", "createdAtMs": 1796219102000,
        "projectId": PROJECT, "project": "nightly-jobs", "task": "backup", "rule": "chat", "channel": "wecom",
        "template": "{project}/{task} {event}{reason} {task.__class__} {nope}",
        "payload": {"event": "run.failed", "runId": "e0000000-0000-4000-8000-000000000006", "reason": "timeout"},
        "secret": {"name": "ROBOT_KEY", "version": 1, "versionId": version_id, "kekId": s.kek_id,
                   "wrappedKey": b64(s.wrapped_key).decode(), "nonce": b64(s.nonce).decode(),
                   "ciphertext": b64(s.ciphertext).decode()},
    }  # fmt: skip
    item.update(changes)
    return item


def test_a_receiver_accepts_exactly_the_signed_body_within_the_window() -> None:
    body = b'{"id":"x"}'
    now = time.time()
    sig = notify_format.signature(b"k1", int(now), body)
    assert notify_format.verify(b"k1", str(int(now)), sig, body, now=now)
    assert notify_format.verify(b"k1", str(int(now)), f"v1=00, {sig}", body, now=now), "any v1 entry of a list"
    assert not notify_format.verify(b"k2", str(int(now)), sig, body, now=now), "another key"
    assert not notify_format.verify(b"k1", str(int(now)), sig, body + b" ", now=now), "another body"
    assert not notify_format.verify(b"k1", str(int(now)), sig, body, now=now + 301), "a replay after the window"
    assert not notify_format.verify(b"k1", "12a", sig, body, now=now) and not notify_format.verify(
        b"k1", None, sig, body, now=now
    )
    request = notify_format.webhook({"id": "n-1", "kind": "run.failed", "url": "https://r.example/h"}, b"k1", now=now)
    headers = request.headers
    assert headers[notify_format.DELIVERY_HEADER] == "n-1" and headers[notify_format.EVENT_HEADER] == "run.failed"
    assert notify_format.verify(b"k1", headers[notify_format.TIMESTAMP_HEADER],
                                headers[notify_format.SIGNATURE_HEADER], request.body, now=now)  # fmt: skip


@pytest.fixture
async def robot() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A WeCom robot endpoint on loopback: errcode 0 for KEY, 45009 for any other key; records what it got."""
    got: list[dict[str, Any]] = []

    async def send(request: web.Request) -> web.Response:
        got.append({"key": request.query.get("key"), "body": json.loads(await request.read())})
        errcode = 0 if request.query.get("key") == KEY.decode() else 45009
        return web.json_response({"errcode": errcode, "errmsg": "ok" if errcode == 0 else "api freq out of limit"})

    app = web.Application()
    app.router.add_post("/cgi-bin/webhook/send", send)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/cgi-bin/webhook/send", got
    finally:
        await runner.cleanup()


async def test_wecom_robot_gets_the_rendered_text_and_the_key_only_as_its_parameter(
    robot: tuple[str, list[dict[str, Any]]],
) -> None:
    url, got = robot
    kek = os.urandom(32)
    sealer = Sealer(kek)
    config = NotifyConfig(dsn="unused", kek=kek, wecom_url=url, loopback_receivers=True)
    dispatcher = Dispatcher(config, db=None, sealer=sealer)  # type: ignore[arg-type]
    async with aiohttp.ClientSession() as http:
        ok = await dispatcher.deliver(http, sealed_item(sealer, KEY))
        limited = await dispatcher.deliver(http, sealed_item(sealer, b"another-robot-key"))
        gone = await dispatcher.deliver(http, sealed_item(sealer, KEY, secret=None))
        item = sealed_item(sealer, KEY)
        item["secret"]["ciphertext"] = sealed_item(sealer, b"x" * len(KEY))["secret"]["ciphertext"]
        tampered = await dispatcher.deliver(http, item)
    assert ok.ok and ok.status_code == 200 and ok.error is None
    assert not limited.ok and limited.error == "wecom.errcode:45009" and limited.status_code == 200
    assert not gone.ok and gone.error == "secret.unavailable"
    assert not tampered.ok and tampered.error == "secret.tampered"
    assert len(got) == 2, "no request without an opened key"
    assert got[0]["key"] == KEY.decode()
    assert got[0]["body"] == {
        "msgtype": "text",
        "text": {"content": "nightly-jobs/backup run.failed, timeout {task.__class__} {nope}"},
    }, "known fields filled in, anything else left as written"
    assert KEY.decode() not in json.dumps(got[0]["body"]), "the key is in the URL, never in the text"


@pytest.mark.parametrize(
    ("address", "alone", "with_loopback"),
    [
        ("127.0.0.1", False, True), ("127.8.9.10", False, True), ("::1", False, True),
        ("::ffff:127.0.0.1", False, True), ("169.254.169.254", False, True), ("fe80::1%eth0", False, True),
        ("0.0.0.0", False, False),  # noqa: S104
        ("::", False, False), ("224.0.0.1", False, False), ("ff02::1", False, False),
        ("10.1.2.3", True, True), ("192.168.1.20", True, True), ("fd00::5", True, True), ("203.0.113.9", True, True),
    ],
)  # fmt: skip
def test_the_addresses_a_receiver_may_have(address: str, alone: bool, with_loopback: bool) -> None:
    assert (receivable(address, False), receivable(address, True)) == (alone, with_loopback)


async def test_a_receiver_on_this_host_is_refused_by_address_and_by_name_unless_allowed(
    robot: tuple[str, list[dict[str, Any]]],
) -> None:
    """The robot listens on 127.0.0.1: named as 127.0.0.1, as ::ffff:127.0.0.1 or as localhost (the resolver's
    answer is judged), nothing is sent; with loopback_receivers, the same deliveries arrive."""
    url, got = robot
    kek = os.urandom(32)
    sealer = Sealer(kek)
    by_name = url.replace("127.0.0.1", "localhost")
    mapped = url.replace("127.0.0.1", "[::ffff:127.0.0.1]")
    for endpoint in (url, by_name, mapped):
        refusing = Dispatcher(NotifyConfig(dsn="unused", kek=kek, wecom_url=endpoint), db=None, sealer=sealer)  # type: ignore[arg-type]
        async with refusing.session() as http:
            refused = await refusing.deliver(http, sealed_item(sealer, KEY))
        assert (refused.ok, refused.error, refused.status_code) == (False, "egress.refused", None), endpoint
    assert got == [], "a request reached the receiver"
    config = NotifyConfig(dsn="unused", kek=kek, wecom_url=by_name, loopback_receivers=True)
    allowing = Dispatcher(config, db=None, sealer=sealer)  # type: ignore[arg-type]
    async with allowing.session() as http:
        delivered = await allowing.deliver(http, sealed_item(sealer, KEY))
    assert delivered.ok and len(got) == 1 and got[0]["key"] == KEY.decode(), "allowed, the name reaches the robot"
