"""Project secrets on a real Worker (docs/decisions/0015-secrets.md): against the real shell, PostgreSQL and real
processes. A plan naming a secret the Project does not have (deleted, or never set) is never started: the
database ends the Attempt `secret_unavailable` at the starting ACK and nothing is spawned or created.
The shell opens the sealed versions with its key-encryption keys and answers their values; the tests check that
a task gets its secret variables and files (as `nobody`, owning them), that what the database
holds of its output never holds a value in any form the masker knows and is exactly the masked file, also across
a Worker killed and restarted mid-task, that a secret deleted while its task runs stops its output after a
restart (`output.unmaskable`) while the Run still completes, and that the secret files are gone at the end.
Touches: a fresh database, the in-process shell on TLS 1.3 loopback, real task and Worker processes (this process
is their child subreaper meanwhile), the journal (read-only while owned), temporary folders.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Final

import pytest

from qinglong.shell.db import Database as ShellDatabase
from qinglong.shell.sealing import Sealer
from qinglong.worker.masking import mask_all, patterns
from tests.conftest import Database as PgDatabase
from tests.integration.shell.conftest import Pki
from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, only_record, poll, rig_over, running

pytestmark = pytest.mark.db

KEK: Final = os.urandom(32)
TOKEN: Final = b"tok-" + uuid.uuid4().hex.encode()
PASSWORD: Final = b"pw-" + uuid.uuid4().hex.encode() + b"\n"


def set_secret(rig: Rig, name: str, value: bytes) -> None:
    """A new current version of a Project secret, sealed as the shell seals it (rows written as a DBA)."""
    version_id = str(uuid.uuid4())
    secret_id, version = rig.one(
        "insert into ql.secrets as s (project_id, name, current_version, created_at_ms, updated_at_ms)"
        " values (%s, %s, 1, ql.now_ms(), ql.now_ms()) on conflict (project_id, name)"
        " do update set current_version = (select coalesce(max(v.version), 0) + 1 from ql.secret_versions v"
        " where v.secret_id = s.id), updated_at_ms = ql.now_ms() returning id, current_version",
        (rig.project, name),
    )
    sealed = Sealer(KEK).seal(value, project_id=str(rig.project), name=name, version_id=version_id)
    rig.conn.execute(
        "insert into ql.secret_versions (id, secret_id, version, size, kek_id, wrapped_key, nonce, ciphertext,"
        " created_by, created_at_ms) values (%s, %s, %s, %s, %s, %s, %s, %s, %s, ql.now_ms())",
        (version_id, secret_id, version, len(value), sealed.kek_id, sealed.wrapped_key, sealed.nonce,
         sealed.ciphertext, rig.operator.id),
    )  # fmt: skip


def delete_secret(rig: Rig, name: str) -> None:
    """As ql_api.secret_delete_v1 does: no current version, and every version destroyed at once."""
    secret_id = rig.one("select id from ql.secrets where project_id = %s and name = %s", (rig.project, name))
    rig.conn.execute("update ql.secrets set current_version = 0 where id = %s", (secret_id,))
    rig.one("select ql.secret_destroy(%s, 0, ql.now_ms())", (secret_id,))


def values_in_database(rig: Rig, values: Mapping[str, bytes]) -> list[str]:
    """Which forms of the values (raw, base64, percent, JSON: masking.patterns) any stored output chunk holds."""
    found = []
    for form in patterns(values.values()):
        if rig.one("select count(*) from ql.output_chunks where position(%s in data) > 0", (form,)):
            found.append(form.decode("latin-1")[:6] + "…")
    return found


def assert_contiguous(rig: Rig, run: str, stream: str = "stdout") -> None:
    end = 0
    for offset, data in rig.rows(
        "select c.byte_offset, c.data from ql.output_chunks c join ql.run_attempts a on a.id = c.attempt_id"
        " where a.run_id = %s and c.stream::text = %s order by c.byte_offset",
        (run, stream),
    ):
        assert offset == end, (offset, end)
        end += len(data)


@pytest.fixture
async def sealed_rig(database: PgDatabase, pki: Pki, tmp_path: Path) -> AsyncIterator[Rig]:
    """The rig, its shell holding KEK (when this shell can open sealed secrets at all)."""
    options: dict[str, Any] = {"sealer": Sealer(KEK)}
    shell_db = ShellDatabase(database.runtime_dsn)
    async with rig_over(database, pki, tmp_path, shell_db, worker_app_options=options) as rig:
        yield rig


@pytest.mark.parametrize("deleted", [False, True])
async def test_a_plan_naming_a_secret_the_project_does_not_have_is_never_started(
    rig: Rig, tmp_path: Path, deleted: bool
) -> None:
    if deleted:
        set_secret(rig, "API_TOKEN", TOKEN)
        delete_secret(rig, "API_TOKEN")
    marker = tmp_path / "ran"
    plan = {"argv": ["touch", str(marker)], "maxAttempts": 1, "secretEnv": {"TOKEN": "API_TOKEN"},
            "secretFiles": {"keys/token": "API_TOKEN"}}  # fmt: skip
    run = rig.add_run(plan)
    client = rig.client()
    lc = rig.lifecycle(client)
    await lc.start()
    await rig.tick_until(lc, lambda: rig.state() == "completed")
    assert rig.run_status(run) == "failed"
    [attempt] = rig.attempts(run)
    assert (attempt["status"], attempt["error_code"]) == ("failed", "secret_unavailable")
    record = rig.record()
    assert record.handle is None and record.data["reason"] == "not started: secret_unavailable"
    assert [c.name for c in client.calls if c.name in ("starting", "running", "start-failure")] == ["starting"]
    assert not (rig.work_dir / record.offer_id).exists(), "a launch folder exists: something was spawned"
    assert not (rig.work_dir / "tasks" / run).exists() and not marker.exists()


SHOWS: Final = (
    'while [ ! -e "$1" ]; do sleep 0.05; done; { id -u; echo "env $TOKEN"; printf "file "; cat keys/token; echo;'
    ' printf %s "$TOKEN" | base64; cat db.pw; } | tee raw; echo done > mine'
)


async def test_a_task_as_nobody_gets_its_secrets_and_the_database_holds_only_masked_output(
    sealed_rig: Rig, tmp_path: Path
) -> None:
    rig = sealed_rig
    set_secret(rig, "API_TOKEN", TOKEN)
    set_secret(rig, "DB_PASSWORD", PASSWORD)
    nobody = pwd.getpwnam("nobody")
    go = "go"  # in the Run's own directory, the task's cwd (nobody cannot reach the test's folders)
    files = {"keys/token": "API_TOKEN", "db.pw": "DB_PASSWORD"}
    plan = {"argv": ["sh", "-c", SHOWS, "sh", go], "maxAttempts": 1, "user": "nobody",
            "secretEnv": {"TOKEN": "API_TOKEN"}, "secretFiles": files}  # fmt: skip
    run = rig.add_run(plan)
    config = rig.write_config(tick_seconds=0.2, extra=['run_as = ["nobody"]'])
    run_dir = rig.work_dir / "tasks" / run
    with child_subreaper():
        worker = rig.start_worker_process(config)
        await poll(lambda: (run_dir / "db.pw").exists(), within=20, every=0.05)
        for path, mode in ((run_dir / "keys", 0o700), (run_dir / "keys" / "token", 0o600), (run_dir / "db.pw", 0o600)):
            st = path.stat()
            assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (nobody.pw_uid, nobody.pw_gid, mode), path
        (run_dir / go).touch()
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=20, every=0.05)
        await poll(lambda: rig.state() == "completed", within=10)
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(10) == 0, worker.output()
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr").decode()
    secrets = {"API_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD}
    assert values_in_database(rig, secrets) == []
    handle = rig.record().handle
    assert handle is not None
    assert not Path(handle.log_path).exists(), "the raw output outlived the Attempt"  # noqa: ASYNC240
    raw = (run_dir / "raw").read_bytes()  # what the task printed, as its own copy (tee)
    assert TOKEN in raw and PASSWORD in raw, "the task did not get its secrets"
    assert rig.output(run) == mask_all(patterns(secrets.values()), raw)
    assert rig.output(run).startswith(f"{nobody.pw_uid}\nenv ***\nfile ***\n***".encode())
    assert sorted(os.listdir(run_dir)) == ["go", "keys", "mine", "raw"], "a secret file was left, or the task's removed"
    assert TOKEN.decode() not in worker.output() and "tok-" not in worker.output()


LINES: Final = 120
PRINTS: Final = (
    "import os, sys, time\n"
    "token = os.environb[b'TOKEN']\n"
    f"for i in range({LINES}):\n"
    "    sys.stdout.buffer.write(b'line %06d ' % i + token + b'\\n'); sys.stdout.flush(); time.sleep(0.02)\n"
)


def expected_raw() -> bytes:
    return b"".join(b"line %06d " % i + TOKEN + b"\n" for i in range(LINES))


async def kill_and_restart(rig: Rig, run: str, tmp_path: Path, *, between: Any = None) -> tuple[bytes, str]:
    """A Worker process ships part of the output, is killed, `between()` runs, another one takes over to the end;
    (what the database held when it was killed, the second Worker's log)."""
    config = rig.write_config(tick_seconds=0.2)
    with child_subreaper():
        first = rig.start_worker_process(config)
        await poll(lambda: len(rig.output(run)) >= 200, within=20, every=0.05)
        first.popen.send_signal(signal.SIGKILL)
        assert await first.wait(5) == -signal.SIGKILL
        record = only_record(rig.journal_path)
        assert record is not None and record.handle is not None
        assert running(record.handle.pid, record.handle.start_time), "the task ended before its Worker was killed"
        held = rig.output(run)
        if between is not None:
            between()
        second = rig.start_worker_process(config)
        await poll(lambda: rig.run_status(run) in ENDED_RUN, within=30, every=0.05)
        await poll(lambda: rig.state() == "completed", within=10)
        second.popen.send_signal(signal.SIGTERM)
        assert await second.wait(10) == 0, second.output()
    return held, second.output()


async def test_a_worker_killed_mid_task_goes_on_masked_from_where_the_database_is(
    sealed_rig: Rig, tmp_path: Path
) -> None:
    rig = sealed_rig
    rig.set_lease_ttl(10000)
    set_secret(rig, "API_TOKEN", TOKEN)
    script = tmp_path / "task.py"
    script.write_text(PRINTS)
    run = rig.add_run({"argv": [sys.executable, str(script)], "maxAttempts": 1,
                       "secretEnv": {"TOKEN": "API_TOKEN"}, "secretFiles": {"token": "API_TOKEN"}})  # fmt: skip
    masked = mask_all(patterns([TOKEN]), expected_raw())
    held, _ = await kill_and_restart(rig, run, tmp_path)
    assert 0 < len(held) < len(masked) and masked.startswith(held)
    assert rig.run_status(run) == "succeeded"
    assert rig.output(run) == masked
    assert_contiguous(rig, run)
    assert values_in_database(rig, {"API_TOKEN": TOKEN}) == []
    assert not (rig.work_dir / "tasks" / run / "token").exists()


async def test_a_secret_deleted_while_its_task_runs_stops_its_output_after_a_restart(
    sealed_rig: Rig, tmp_path: Path
) -> None:
    rig = sealed_rig
    rig.set_lease_ttl(10000)
    set_secret(rig, "API_TOKEN", TOKEN)
    script = tmp_path / "task.py"
    script.write_text(PRINTS)
    run = rig.add_run({"argv": [sys.executable, str(script)], "maxAttempts": 1,
                       "secretEnv": {"TOKEN": "API_TOKEN"}, "secretFiles": {"token": "API_TOKEN"}})  # fmt: skip
    held, log = await kill_and_restart(rig, run, tmp_path, between=lambda: delete_secret(rig, "API_TOKEN"))
    assert rig.run_status(run) == "succeeded", "the Run did not complete"
    assert rig.output(run) == held, "output was shipped without the values to mask it"
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    unmaskable = [{k: v for k, v in line.items() if k not in ("time", "level", "component")} for line in lines
                  if line.get("event") == "output.unmaskable"]  # fmt: skip
    assert unmaskable == [{"event": "output.unmaskable", "run_id": run}], log
    assert values_in_database(rig, {"API_TOKEN": TOKEN}) == []
    assert not (rig.work_dir / "tasks" / run / "token").exists()


FLOOD_LINES: Final = 100_000
FLOODS: Final = (
    "import os, sys, time\n"
    "line = b'[' + os.environb[b'TOKEN'] + b']' + b'.' * 60 + b'\\n'\n"
    f"for i in range({FLOOD_LINES}):\n"
    "    sys.stdout.buffer.write(line)\n"
    "    if i % 2000 == 0: sys.stdout.flush(); time.sleep(0.05)\n"
    "sys.stdout.buffer.write(b'END\\n')\n"
)


async def test_a_flood_of_secrets_is_capped_on_disk_and_leaves_masked_across_cuts_and_a_restart(
    sealed_rig: Rig, tmp_path: Path
) -> None:
    """A task prints 9.5 MiB, a secret on every line, faster than a Worker with a 64 KiB head and 32 KiB tail
    segments ships it, and that Worker is SIGKILLed and another takes over: the launch's folder never holds more
    than the cap, and the database holds the masked head and tail, not one byte of the value, not even the part
    of an occurrence a cut split."""
    rig = sealed_rig
    set_secret(rig, "API_TOKEN", TOKEN)
    task = tmp_path / "floods.py"
    task.write_text(FLOODS)
    run = rig.add_run({"argv": [sys.executable, str(task)], "maxAttempts": 1, "secretEnv": {"TOKEN": "API_TOKEN"}})
    config = rig.write_config(
        tick_seconds=0.2, extra=["allow_root_tasks = true", "output_head_kib = 64", "output_tail_kib = 32"]
    )
    cap = 2 * (64 + 2 * 32) * 1024 + 4096  # two streams, and the launch's small files
    peak = 0

    def sample() -> bool:
        nonlocal peak
        held = 0
        for f in rig.work_dir.glob("*/*"):  # the launches' folders (tasks/ holds no file at this depth)
            with contextlib.suppress(FileNotFoundError):
                held += f.stat().st_size if f.is_file() else 0
        peak = max(peak, held)
        return False

    with child_subreaper():
        first = rig.start_worker_process(config)
        await poll(lambda: sample() or len(rig.output(run)) >= 64 * 1024, within=20, every=0.02)
        first.popen.send_signal(signal.SIGKILL)
        assert await first.wait(5) == -signal.SIGKILL
        second = rig.start_worker_process(config)
        await poll(lambda: sample() or rig.run_status(run) in ENDED_RUN, within=60, every=0.02)
        await poll(lambda: rig.state() == "completed", within=10)
        second.popen.send_signal(signal.SIGTERM)
        assert await second.wait(10) == 0, second.output()
    assert rig.run_status(run) == "succeeded", rig.output(run, "stderr").decode()
    assert 0 < peak <= cap, (peak, cap)
    assert values_in_database(rig, {"API_TOKEN": TOKEN}) == []
    stored = b"".join(
        bytes(data)
        for (data,) in rig.rows(
            "select c.data from ql.output_chunks c join ql.run_attempts a on a.id = c.attempt_id"
            " where a.run_id = %s and c.stream = 'stdout' order by c.byte_offset",
            (run,),
        )
    )
    masked_line = b"[***]" + b"." * 60 + b"\n"
    assert stored.startswith(masked_line * 100) and stored.endswith(masked_line * 100 + b"END\n")
    assert stored.translate(None, b"[].\n*END") == b"", "a part of the value, or a byte no line has, was stored"
