"""The operator's Worker commands as a user runs them: `python -m qinglong.worker journal list|show|
resolve` and `status`, each a separate OS process, against real journals made with `Journal` (records
shaped exactly as the Worker writes them, lease token included). Refusals are proven to change
nothing by comparing the journal's rows before and after; a busy journal is one this process holds
with `Journal.open`. The last test runs a real `qinglong-worker run` against the in-process shell
and reads the status it writes.

Touches: tmp_path (configs, journals, status files), short-lived child processes (the commands, one
Python child that writes a status and exits) and, in the `db` test, a fresh database, the shell on
loopback and one Worker process.
"""

from __future__ import annotations

import asyncio
import base64
import getpass
import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import pytest

from qinglong.wire.offer import Offer, OfferOffered, Plan
from qinglong.worker.admin import write_status
from qinglong.worker.inbox import Inbox
from qinglong.worker.journal import STATES, Journal, JournalBusy, State
from tests.integration.worker.conftest import Rig, poll

STOPPED: Final = "lease_lost_local_execution_stopped"
RESOLVABLE: Final[tuple[State, ...]] = ("recovery_required", "lease_lost_local_execution_unverified")


# -- helpers -------------------------------------------------------------------------------------------


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`qinglong-worker ARGS…` as its own process (the console script's `main`, run as a module)."""
    done = subprocess.run(
        [sys.executable, "-m", "qinglong.worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """Exit 2 with exactly one line on stderr and nothing on stdout; that line."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stdout == "", done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A full worker.toml whose origin nothing listens on: the commands must not need it."""
    path = tmp_path / "worker.toml"
    path.write_text(
        "\n".join(
            (
                'origin = "https://127.0.0.1:9"',
                f'worker_id = "{uuid.uuid4()}"',
                "generation = 1",
                'certificate = "absent/worker.crt"',
                'key = "absent/worker.key"',
                'trust_anchors = "absent/ca.crt"',
                'journal = "state/inbox.sqlite"',
                'work_dir = "state/runs"',
                "require_signed_plans = false",
                "",
            )
        )
    )
    return path


@pytest.fixture
def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "inbox.sqlite"


def token() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()


def record_data(lease_token: str, reason: str | None = None) -> dict[str, Any]:
    """A record's data exactly as the Worker builds it (Inbox.to_data), lease token included."""
    offer = Offer(
        offer_id=str(uuid.uuid4()),
        project_id=str(uuid.uuid4()),
        run_id=str(uuid.uuid4()),
        attempt_id=str(uuid.uuid4()),
        attempt_no=1,
        lease_generation=1,
        lease_version=1,
        offered_at_ms=1_700_000_000_000,
        lease_expires_at_ms=1_700_000_030_000,
        offer_expires_at_ms=1_700_000_010_000,
        plan=Plan(argv=("sleep", "60")),
    )
    offered = OfferOffered(offer=offer, lease_token=lease_token)
    return Inbox(offer=offered, session_id=str(uuid.uuid4()), lease_version=1, reason=reason).to_data()


def insert(path: Path, state: State, reason: str | None = None, lease_token: str | None = None) -> dict[str, Any]:
    """Journal one record in `state` (owning the journal only meanwhile); its data."""
    data = record_data(lease_token or token(), reason)
    with Journal.open(path) as journal:
        journal.insert(data["offer"]["offer"]["offerId"], state, data)
    return data


def offer_of(data: dict[str, Any]) -> str:
    return str(data["offer"]["offer"]["offerId"])


def run_of(data: dict[str, Any]) -> str:
    return str(data["offer"]["offer"]["runId"])


def rows(path: Path) -> list[tuple[Any, ...]]:
    """Every row of the journal, read-only (independent of the code under test)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sql = "SELECT seq, offer_id, revision, state, data, updated_at FROM inbox ORDER BY seq"
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def row_of(path: Path, offer_id: str) -> tuple[int, str, dict[str, Any], float]:
    """(revision, state, data, updated_at) of one record."""
    found = [r for r in rows(path) if r[1] == offer_id]
    assert len(found) == 1, found
    _, _, revision, state, data, updated_at = found[0]
    return revision, state, json.loads(data), updated_at


def iso_z(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_ms(text: str) -> float:
    """Seconds since the epoch of a UTC ISO time ending in Z (the commands' format)."""
    assert text.endswith("Z"), text
    return datetime.fromisoformat(text[:-1] + "+00:00").timestamp()


# -- journal list -------------------------------------------------------------------------------------


def test_list_prints_one_line_per_record_newest_last_and_filters_by_state(
    tmp_path: Path, config: Path, journal_path: Path
) -> None:
    secret = token()
    first = insert(journal_path, "running_acknowledged", lease_token=secret)
    isolated = insert(journal_path, "recovery_required", reason=f"protocol: answer held {secret}")
    finished = insert(journal_path, "completed")
    with Journal.open(journal_path) as journal:  # the first record changes last: it is the newest
        time.sleep(0.01)
        journal.cas(offer_of(first), 1, state="completion_pending", data=first)
    newest_last = [isolated, finished, first]

    listed = cli(tmp_path, "journal", "list", "--config", str(config))
    assert (listed.returncode, listed.stderr) == (0, "")
    lines = listed.stdout.splitlines()
    assert len(lines) == 3
    for line, data in zip(lines, newest_last, strict=True):
        _, state, _, updated_at = row_of(journal_path, offer_of(data))
        offer, run, shown_state, updated, *reason = line.split()
        assert (offer, run, shown_state) == (offer_of(data), run_of(data), state)
        assert abs(utc_ms(updated) - updated_at) < 0.001
        assert " ".join(reason) == ("-" if data["reason"] is None else "protocol: answer held <redacted>")
    assert secret not in listed.stdout + listed.stderr  # its own record's token, and the one in a reason

    as_json = cli(tmp_path, "journal", "list", "--config", str(config), "--json")
    assert as_json.returncode == 0, as_json.stderr
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [o["offer"] for o in objects] == [offer_of(d) for d in newest_last]
    assert objects[0] == {
        "offer": offer_of(isolated),
        "run": run_of(isolated),
        "state": "recovery_required",
        "reason": "protocol: answer held <redacted>",
        "updatedAt": objects[0]["updatedAt"],
        "revision": 1,
        "seq": 2,
    }
    assert secret not in as_json.stdout

    only = cli(tmp_path, "journal", "list", "--config", str(config), "--state", "recovery_required", "--json")
    assert [json.loads(line)["offer"] for line in only.stdout.splitlines()] == [offer_of(isolated)]
    two = cli(tmp_path, "journal", "list", "--config", str(config), "--state", "completed", "--state", "accepted")
    assert [line.split()[0] for line in two.stdout.splitlines()] == [offer_of(finished)]
    assert "invalid choice" in refused(cli(tmp_path, "journal", "list", "--config", str(config), "--state", "bogus"))


# -- journal show -------------------------------------------------------------------------------------


def test_show_prints_the_record_with_its_lease_token_redacted(tmp_path: Path, config: Path, journal_path: Path) -> None:
    secret = token()
    data = insert(journal_path, "recovery_required", reason=f"contract broken near {secret}", lease_token=secret)
    insert(journal_path, "accepted")
    before = rows(journal_path)

    shown = cli(tmp_path, "journal", "show", offer_of(data), "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert secret not in shown.stdout and secret not in shown.stderr
    assert json.dumps(secret)[1:-1] not in shown.stdout  # not even escaped
    record = json.loads(shown.stdout)
    revision, state, stored, updated_at = row_of(journal_path, offer_of(data))
    assert stored["offer"]["leaseToken"] == secret  # the journal keeps it; only the output hides it
    expected = json.loads(json.dumps(stored))
    expected["offer"]["leaseToken"] = "<redacted>"
    expected["reason"] = "contract broken near <redacted>"
    assert record["data"] == expected
    assert (record["offer"], record["revision"], record["state"]) == (offer_of(data), revision, state)
    assert abs(utc_ms(record["updatedAt"]) - updated_at) < 0.001
    assert rows(journal_path) == before

    line = refused(cli(tmp_path, "journal", "show", str(uuid.uuid4()), "--config", str(config)))
    assert "no record" in line


def test_read_commands_work_while_a_worker_owns_the_journal(tmp_path: Path, config: Path, journal_path: Path) -> None:
    data = insert(journal_path, "recovery_required", reason="restart during launch: no identity file")
    with Journal.open(journal_path):  # a running Worker holds the flock
        listed = cli(tmp_path, "journal", "list", "--config", str(config))
        shown = cli(tmp_path, "journal", "show", offer_of(data), "--config", str(config))
        summary = cli(tmp_path, "status", "--config", str(config))
    assert listed.returncode == shown.returncode == summary.returncode == 0, (listed, shown, summary)
    assert offer_of(data) in listed.stdout and offer_of(data) in shown.stdout
    assert "recovery_required: 1" in summary.stdout


# -- journal resolve ------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", RESOLVABLE)
def test_resolve_settles_an_isolated_record_and_writes_an_audit_line(
    tmp_path: Path, config: Path, journal_path: Path, state: State
) -> None:
    data = insert(journal_path, state, reason="running before this Worker spawned")
    other = insert(journal_path, "recovery_required")
    others_before = row_of(journal_path, offer_of(other))
    started = time.time()

    done = cli(
        tmp_path, "journal", "resolve", offer_of(data), "--config", str(config), "--stopped",
        "--reason", "pgrep found nothing; run shown lost",
    )  # fmt: skip
    ended = time.time()
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"offer {offer_of(data)}: {state} → {STOPPED}\n"
    audit_lines = done.stderr.splitlines()
    assert len(audit_lines) == 1, done.stderr
    audit = json.loads(audit_lines[0])
    operator = getpass.getuser()
    assert audit == {
        "time": audit["time"],
        "event": "journal.resolve",
        "operator": operator,
        "offer": offer_of(data),
        "run": run_of(data),
        "from": state,
        "to": STOPPED,
        "reason": "pgrep found nothing; run shown lost",
    }
    assert started - 0.001 <= utc_ms(audit["time"]) <= ended + 0.001

    revision, new_state, stored, _ = row_of(journal_path, offer_of(data))
    assert (revision, new_state) == (2, STOPPED)
    resolved = stored.pop("resolved")
    assert resolved == {"by": operator, "at": audit["time"], "reason": "pgrep found nothing; run shown lost",
                        "from": state}  # fmt: skip
    assert stored == data  # everything else as it was, the lease token included
    assert row_of(journal_path, offer_of(other)) == others_before
    with Journal.open(journal_path) as journal:  # a Worker starting now fails closed only on the other
        assert journal.count(states=["recovery_required"]) == 1

    again = refused(cli(tmp_path, "journal", "resolve", offer_of(data), "--config", str(config), "--stopped",
                        "--reason", "twice"))  # fmt: skip
    assert STOPPED in again


@pytest.mark.parametrize("state", sorted(set(STATES) - set(RESOLVABLE)))
def test_resolve_refuses_a_record_in_any_other_state_and_changes_nothing(
    tmp_path: Path, config: Path, journal_path: Path, state: State
) -> None:
    data = insert(journal_path, state)
    before = rows(journal_path)
    line = refused(
        cli(tmp_path, "journal", "resolve", offer_of(data), "--config", str(config), "--stopped", "--reason", "x")
    )
    assert f"is {state}" in line
    assert rows(journal_path) == before


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("{unknown}", "--stopped", "--reason", "checked"), "no record"),
        (("{offer}", "--reason", "checked"), "--stopped"),
        (("{offer}", "--stopped"), "--reason"),
        (("{offer}", "--stopped", "--reason", "   "), "--reason"),
        (("{offer}", "--stopped", "--reason", "two\nlines"), "--reason"),
    ],
)
def test_resolve_refuses_bad_input_and_changes_nothing(
    tmp_path: Path, config: Path, journal_path: Path, args: tuple[str, ...], says: str
) -> None:
    data = insert(journal_path, "recovery_required")
    before = rows(journal_path)
    filled = [a.format(offer=offer_of(data), unknown=uuid.uuid4()) for a in args]
    line = refused(cli(tmp_path, "journal", "resolve", *filled[:1], "--config", str(config), *filled[1:]))
    assert says in line
    assert rows(journal_path) == before


def test_resolve_refuses_while_a_worker_owns_the_journal(tmp_path: Path, config: Path, journal_path: Path) -> None:
    data = insert(journal_path, "recovery_required")
    before = rows(journal_path)
    argv = ("journal", "resolve", offer_of(data), "--config", str(config), "--stopped", "--reason", "checked")
    with Journal.open(journal_path):  # what a running Worker holds
        line = refused(cli(tmp_path, *argv))
        assert "owns this journal" in line
        assert rows(journal_path) == before
    assert cli(tmp_path, *argv).returncode == 0  # the same command, once the owner is gone
    assert row_of(journal_path, offer_of(data))[1] == STOPPED


def test_resolve_holds_the_journal_so_no_worker_can_own_it_meanwhile(
    tmp_path: Path, config: Path, journal_path: Path
) -> None:
    """The command owns the journal through Journal.open: a Worker starting while it writes is busy."""
    data = insert(journal_path, "recovery_required")
    probe = (  # the real command, with a Worker's Journal.open attempted just before the write
        "import sys\nfrom pathlib import Path\n"
        "from qinglong.worker.journal import Journal, JournalBusy\n"
        "real = Journal.resolve\n"
        "def resolve(self, *a, **k):\n"
        "    try:\n        Journal.open(Path(sys.argv[1]))\n    except JournalBusy:\n        print('busy')\n"
        "    return real(self, *a, **k)\n"
        "Journal.resolve = resolve\n"
        "from qinglong.worker.run import main\nsys.exit(main(sys.argv[2:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(journal_path), "journal", "resolve", offer_of(data), "--config", str(config),
         "--stopped", "--reason", "checked"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "busy"
    assert row_of(journal_path, offer_of(data))[1] == STOPPED


def test_commands_never_create_a_missing_journal(tmp_path: Path, config: Path, journal_path: Path) -> None:
    for argv in (
        ("journal", "list"),
        ("journal", "show", "x"),
        ("journal", "resolve", "x", "--stopped", "--reason", "checked"),
    ):
        assert "no journal" in refused(cli(tmp_path, *argv, "--config", str(config)))
    summary = cli(tmp_path, "status", "--config", str(config))
    assert summary.returncode == 0, summary.stderr
    assert "no journal yet" in summary.stdout and "no Worker has written a status" in summary.stdout
    assert not journal_path.parent.exists()
    assert "cannot read" in refused(cli(tmp_path, "status", "--config", str(tmp_path / "missing.toml")))


# -- status ---------------------------------------------------------------------------------------------


def status_lines(tmp_path: Path, config: Path) -> list[str]:
    done = cli(tmp_path, "status", "--config", str(config))
    assert (done.returncode, done.stderr) == (0, ""), done
    return done.stdout.splitlines()


def test_status_summarises_the_journal_and_tells_a_live_status_from_a_stale_one(
    tmp_path: Path, config: Path, journal_path: Path
) -> None:
    secret = token()
    isolated = insert(journal_path, "recovery_required", reason="protocol: bad answer", lease_token=secret)
    unverified = insert(journal_path, "lease_lost_local_execution_unverified", reason="identity unproven")
    for _ in range(2):
        insert(journal_path, "completed")

    lines = status_lines(tmp_path, config)
    assert lines[:5] == [
        f"journal: {journal_path}",
        "  records: 4",
        "  completed: 2",
        "  recovery_required: 1",
        "  lease_lost_local_execution_unverified: 1",
    ]
    assert lines[5] == "needs an operator: 2"
    assert [line.split()[0] for line in lines[6:8]] == [offer_of(isolated), offer_of(unverified)]
    assert lines[8] == f"worker: no Worker has written a status ({journal_path}.status.json)"
    assert secret not in "\n".join(lines)

    # A status written by this (running) process.
    session = str(uuid.uuid4())
    contact_ms = time.time_ns() // 1_000_000 - 5000
    write_status(journal_path, session_id=session, last_contact_ms=contact_ms, failed_closed=True)
    status_file = Path(f"{journal_path}.status.json")
    assert stat.S_IMODE(status_file.stat().st_mode) == 0o600
    lines = status_lines(tmp_path, config)
    assert lines[8:10] == [f"worker: pid {os.getpid()} running", f"  session: {session}"]
    assert re.fullmatch(rf"  last contact with the control plane: {iso_z(contact_ms)} \((5|6|7) s ago\)", lines[10])
    assert lines[11] == "  failed closed: yes"

    # A status written by a process that has exited since: stale.
    child = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; from qinglong.worker.admin import write_status;"
         " write_status(Path(sys.argv[1]), session_id=None, last_contact_ms=None, failed_closed=False);"
         " import os; print(os.getpid())", str(journal_path)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    pid = int(child.stdout)
    lines = status_lines(tmp_path, config)
    assert lines[8:12] == [f"worker: pid {pid} no longer runs: this status is stale", "  session: none",
                           "  last contact with the control plane: never", "  failed closed: no"]  # fmt: skip


@pytest.mark.db
async def test_a_running_worker_writes_its_status_and_owns_its_journal(rig: Rig) -> None:
    config = rig.write_config(tick_seconds=0.2, shutdown_seconds=5.0)
    status_file = Path(f"{rig.journal_path}.status.json")
    worker = rig.start_worker_process(config)

    def written() -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = json.loads(status_file.read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return found

    before = time.time_ns() // 1_000_000
    await poll(lambda: (written() or {}).get("last_contact_ms") is not None, within=20)
    first = written()
    assert first is not None
    assert set(first) == {"pid", "start_time", "boot_id", "session_id", "last_contact_ms", "failed_closed",
                          "disk", "updated_ms"}  # fmt: skip
    assert set(first["disk"]) == {"low", "free_bytes", "min_free_bytes", "used_bytes"} and not first["disk"]["low"]
    assert first["pid"] == worker.pid and first["failed_closed"] is False
    assert stat.S_IMODE(os.stat(status_file).st_mode) == 0o600
    live = rig.one("select id::text from ql.worker_sessions where worker_id = %s and status = 'live'", (rig.worker_id,))
    assert first["session_id"] == live
    assert before - 1000 <= first["last_contact_ms"] <= time.time_ns() // 1_000_000
    # Heartbeats move the last contact on, tick by tick.
    await poll(lambda: (written() or {}).get("last_contact_ms", 0) > first["last_contact_ms"], within=10)

    summary = await asyncio.to_thread(cli, rig.root, "status", "--config", str(config))
    assert summary.returncode == 0, summary.stderr
    assert f"worker: pid {worker.pid} running" in summary.stdout
    assert f"  session: {live}" in summary.stdout
    assert "  disk: pulling; free " in summary.stdout
    offer = str(uuid.uuid4())
    argv = ("journal", "resolve", offer, "--config", str(config), "--stopped", "--reason", "x")
    assert "owns this journal" in refused(await asyncio.to_thread(cli, rig.root, *argv))
    with pytest.raises(JournalBusy):  # still the Worker's
        Journal.open(rig.journal_path)

    worker.popen.send_signal(signal.SIGTERM)
    assert await worker.wait(10) == 0, worker.output()
    stale = await asyncio.to_thread(cli, rig.root, "status", "--config", str(config))
    assert f"worker: pid {worker.pid} no longer runs: this status is stale" in stale.stdout
