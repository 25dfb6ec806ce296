"""Project secrets through the real system, then a search for every value everywhere it could have gone
(docs/decisions/0015-secrets.md). A PostgreSQL cluster of its own logs every statement with its bind
parameters; the real shell (`qinglong shell serve`, with a key-encryption key) and a real `qinglong-worker run`
process run tasks that receive N secrets as a variable and as a file and print each value in every encoding
the Worker masks, in two writes with a pause between them, on stdout and stderr. Some secrets are set again
while the task that received them still prints (a rotation under load), and a Worker of another pool asks
the shell for every live Attempt's secrets with a starting ACK of its own. Then each value, in each of its
encodings, is searched for in: the PostgreSQL log, `pg_dump --data-only`, the shell's and the Worker's logs,
every file the Worker keeps (its journal, its Runs' folders, its secret store on a tmpfs), every event, and
every answer of the user API to an owner, an operator and a viewer. A control task carries a plain `--env`
value, not a secret: the search must find it (in the PostgreSQL log, `pg_dump` and the Worker's journal), or
it proves nothing. `counts()` gives the figures of bench/results.json `secrets`.

Touches: `root` (the cluster, the PKI, the key file, the shell's and the Worker's folders and logs), loopback
ports and the processes it starts (stopped at the end).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import time
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from qinglong.cli import admin, pki
from qinglong.cli import operators as op
from qinglong.cli.api import ApiError, UserApi
from qinglong.devdb import Cluster, server_bindir
from qinglong.shell.sealing import new_kek
from qinglong.wire import ActivationRequest
from qinglong.wire.common import ENDED_RUN_STATUSES, token_digest
from qinglong.worker.client import ClientError, FileCredentials, IngressClient
from qinglong.worker.masking import patterns
from qinglong.worker.run import load as load_worker_config
from tests.support.env import Place, ShellProcess, new_env, start_and_deploy, start_worker, stop_process
from tests.support.progress import say

DATABASE = "leaks"
LOG_EVERY_STATEMENT = {"log_statement": "all", "log_min_messages": "info"}  # the settings of the engine's cluster
# How each task prints its value: (label, the task's Python expression over `v`, the same here). Every form is
# one mask case per secret; the masker's patterns (qinglong.worker.masking.patterns) cover all of them.
FORMS: tuple[tuple[str, str, Callable[[bytes], bytes]], ...] = (
    ("raw", "v", lambda v: v),
    ("base64", "base64.b64encode(v)", base64.b64encode),
    ("base64-unpadded", "base64.b64encode(v).rstrip(b'=')", lambda v: base64.b64encode(v).rstrip(b"=")),
    ("base64url", "base64.urlsafe_b64encode(v)", base64.urlsafe_b64encode),
    ("base64url-unpadded", "base64.urlsafe_b64encode(v).rstrip(b'=')",
     lambda v: base64.urlsafe_b64encode(v).rstrip(b"=")),
    ("percent", "urllib.parse.quote(v, safe='').encode()", lambda v: urllib.parse.quote(v, safe="").encode()),
    ("percent-plus", "urllib.parse.quote_plus(v, safe='').encode()",
     lambda v: urllib.parse.quote_plus(v, safe="").encode()),
    ("json", "json.dumps(v.decode())[1:-1].encode()", lambda v: json.dumps(v.decode())[1:-1].encode()),
    ("json-utf8", "json.dumps(v.decode(), ensure_ascii=False)[1:-1].encode()",
     lambda v: json.dumps(v.decode(), ensure_ascii=False)[1:-1].encode()),
)  # fmt: skip
# The task: each form of $SECRET_VALUE to stdout in two writes with a pause, then the file's content to
# stderr, then (a rotation task) a pause and everything again.
TASK = """
import base64, json, os, sys, time, urllib.parse
v = os.environb[b"SECRET_VALUE"]
assert open("secret.txt", "rb").read() == v
rounds = int(sys.argv[1])
for r in range(rounds):
    for label, text in [{forms}]:
        half = len(text) // 2
        sys.stdout.buffer.write(label.encode() + b": " + text[:half]); sys.stdout.flush()
        time.sleep(0.05)
        sys.stdout.buffer.write(text[half:] + b"\\n"); sys.stdout.flush()
    sys.stderr.buffer.write(b"file: " + open("secret.txt", "rb").read() + b"\\n"); sys.stderr.flush()
    if r + 1 < rounds:
        time.sleep({pause})
"""


@dataclass(frozen=True)
class LeakConfig:
    secrets: int = 10
    rotations: int = 2  # secrets set again while a task that received them still prints
    pause_s: float = 4.0  # a rotation task's pause between its two rounds of printing
    within_s: float = 150.0  # for every Run to end
    fsync: bool = False


@dataclass
class Found:
    secrets_tried: int = 0
    mask_cases: int = 0
    mask_misses: list[str] = field(default_factory=list)
    hits: list[str] = field(default_factory=list)
    rotations_under_load: int = 0
    stale_calls: int = 0
    deliveries_to_stale_workers: int = 0
    runs: dict[str, str] = field(default_factory=dict)
    places_searched: int = 0
    control_found_in: list[str] = field(default_factory=list)  # where the plain --env value was found

    def counts(self) -> dict[str, Any]:
        """The figures of bench/results.json `secrets`, and what they were measured over."""
        return {
            "secrets_tried": self.secrets_tried,
            "secret_hits": len(self.hits),
            "mask_cases": self.mask_cases,
            "mask_misses": len(self.mask_misses),
            "rotations_under_load": self.rotations_under_load,
            "deliveries_to_stale_workers": self.deliveries_to_stale_workers,
            "stale_calls": self.stale_calls,
            "places_searched": self.places_searched,
            "control_found_in": len(self.control_found_in),
            "runs_succeeded": sum(1 for s in self.runs.values() if s == "succeeded"),
            "runs": len(self.runs),
        }


def _value(i: int) -> bytes:
    """A distinct value of 24+ bytes; every third has characters that percent-encoding and JSON escape, every
    third after that non-ASCII text."""
    core = f"S{i}-{secrets.token_urlsafe(18)}"
    extra = ("", ' "q" & / + = ?', " é中文")[i % 3]
    return (core + extra).encode()


class Leaks:
    def __init__(self, root: Path, config: LeakConfig, place: Place | None = None) -> None:
        self.root, self.config, self.place = root, config, place
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        self.cluster = place.cluster if place else Cluster(root / "pg", fsync=config.fsync, preload_cron=False,
                                                           settings=LOG_EVERY_STATEMENT)  # fmt: skip
        self.database = DATABASE
        self.log_offset = 0  # where this run's lines of the PostgreSQL log begin
        self.found = Found()
        self.values: dict[str, bytes] = {}
        self.control = f"control-{secrets.token_hex(12)}"
        self.answers: list[bytes] = []  # every user API answer, as received
        self.worker_proc: subprocess.Popen[bytes] | None = None

    # -- set-up ---------------------------------------------------------------------------------------

    def dsn(self) -> str:
        return self.cluster.dsn(self.database)

    def start(self) -> None:
        if self.place is not None:
            self.check_logs_every_statement()
            self.log_offset = self.cluster.log_file.stat().st_size
            self.database = self.place.new_database(DATABASE)
        else:
            start_and_deploy(self.cluster, DATABASE)
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute("update ql.settings set lease_ttl_ms = 5000, offer_ttl_ms = 10000")
        self.env = env = new_env(self.root, self.cluster)
        kek = self.root / "secrets.kek"
        kek.write_text(new_kek())
        kek.chmod(0o600)
        self.shell = ShellProcess(env, self.database, kek_file=kek)
        dsn = self.dsn()
        self.project = admin.call(dsn, op.project_create_v1, p_name="leaks")["projectId"]
        self.tokens: dict[str, str] = {}
        for role in ("owner", "operator", "viewer"):
            token = self.tokens[role] = secrets.token_hex(24)
            subject = admin.call(dsn, op.subject_create_v1, p_kind="user", p_name=f"leaks-{role}",
                                 p_token_digest=token_digest(token))["subjectId"]  # fmt: skip
            admin.call(dsn, op.role_binding_set_v1, p_project_id=self.project, p_subject_id=subject, p_role=role,
                       p_active=True)  # fmt: skip
        self.worker_id, self.stale_id = str(uuid.uuid4()), str(uuid.uuid4())
        for worker_id, name, pool in ((self.worker_id, "leaks-worker", "default"), (self.stale_id, "stale", "other")):
            issued = pki.issue_worker(env.certs, worker_id, name=name)
            admin.call(dsn, op.worker_enroll_v1, p_worker_id=worker_id, p_name=name, p_pool=pool,
                       p_cert_fingerprint=issued.fingerprint)  # fmt: skip
            if worker_id == self.worker_id:
                self.worker_certs = issued
            else:
                self.stale_certs = issued
        self.shell.start()
        self.api = {role: UserApi(f"https://127.0.0.1:{self.shell.user_port}", token, env.ca())
                    for role, token in self.tokens.items()}  # fmt: skip
        folder = self.root / "worker"
        folder.mkdir()
        self.worker_folder = folder
        (folder / "worker.toml").write_text(
            f'origin = "{self.shell.origin}"\nworker_id = "{self.worker_id}"\ngeneration = 1\ncapacity = 8\n'
            f'certificate = "{self.worker_certs.certificate}"\nkey = "{self.worker_certs.key}"\n'
            f'trust_anchors = "{env.ca()}"\njournal = "{folder}/inbox.sqlite"\nwork_dir = "{folder}/runs"\n'
            "tick_seconds = 0.3\nstop_grace_seconds = 2.0\nrequire_signed_plans = false\n"
            "keep_files_seconds = 86400\n"  # every file a task left is searched after the run
            + ("allow_root_tasks = true\n" if os.geteuid() == 0 else "")
        )
        self.worker_proc = start_worker(folder / "worker.toml", folder / "worker.log")

    def stop_worker(self) -> None:
        if self.worker_proc is not None:
            stop_process(self.worker_proc)

    def stop(self) -> None:
        self.stop_worker()
        if hasattr(self, "shell"):
            self.shell.stop()
        if self.place is None:
            self.cluster.stop()
        elif self.database != DATABASE:
            self.place.drop_database(self.database)

    def check_logs_every_statement(self) -> None:
        """A borrowed cluster must log as this engine's own would, or the search of its log proves nothing."""
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            for name, value in LOG_EVERY_STATEMENT.items():
                row = conn.execute("select setting from pg_catalog.pg_settings where name = %s", (name,)).fetchone()
                assert row is not None and row[0] == value, f"the borrowed cluster's {name} is {row}, not {value}"

    def _user(self, role: str, call: str, *args: Any) -> dict[str, Any]:
        answer: dict[str, Any] = getattr(self.api[role], call)(*args)
        self.answers.append(json.dumps(answer).encode())
        return answer

    # -- the run --------------------------------------------------------------------------------------

    def run(self) -> None:
        cfg, dsn = self.config, self.dsn()
        forms = ", ".join(f"({label!r}, {expr})" for label, expr, _ in FORMS)
        # One line: the wire refuses control characters in argv.
        script = base64.b64encode(TASK.format(forms=forms, pause=cfg.pause_s).encode()).decode()
        runs: dict[str, str] = {}
        for i in range(cfg.secrets):
            name = f"LEAK_{i}"
            self.values[name] = _value(i)
            self._user("owner", "set_secret", self.project, name, self.values[name])
            rounds = 2 if i < cfg.rotations else 1
            plan = {
                "argv": ["python3", "-c", f"import base64; exec(base64.b64decode('{script}'))", str(rounds)],
                "secretEnv": {"SECRET_VALUE": name},
                "secretFiles": {"secret.txt": name},
                "timeoutMs": 120000,
            }
            task = admin.call(
                dsn,
                op.task_create_v1,
                p_project_id=self.project,
                p_name=f"leak-{i}",
                p_plan=plan,
                p_plan_signature=None,
            )
            runs[name] = self._user("operator", "enqueue", self.project, task["taskId"])["runId"]
        control = {"argv": ["true"], "env": {"CONTROL": self.control}, "timeoutMs": 60000}
        task = admin.call(
            dsn, op.task_create_v1, p_project_id=self.project, p_name="control", p_plan=control, p_plan_signature=None
        )
        runs["CONTROL"] = self._user("operator", "enqueue", self.project, task["taskId"])["runId"]
        self.found.secrets_tried = len(self.values)
        say(f"leaks: {len(runs)} Runs queued, {cfg.rotations} of them print twice around a rotation")

        rotated: set[str] = set()
        started = time.monotonic()
        while True:
            states = {
                name: self._user("viewer", "show", self.project, run)["run"]["status"] for name, run in runs.items()
            }
            for name in list(runs)[: cfg.rotations]:
                if name not in rotated and states[name] == "running" and self._printed_once(runs[name]):
                    asyncio.run(self._stale_calls())
                    new = _value(1000 + len(rotated))
                    self._user("owner", "set_secret", self.project, name, new)
                    self.values[f"{name}@2"] = new  # never delivered to the running Attempt: searched all the same
                    rotated.add(name)
            if all(s in ENDED_RUN_STATUSES for s in states.values()):
                break
            if time.monotonic() - started > cfg.within_s:
                break
            time.sleep(0.3)
        self.found.rotations_under_load = len(rotated)
        self.found.runs = states
        say(f"leaks: Runs ended {states}")

    def _printed_once(self, run: str) -> bool:
        """The Run's stored stdout already holds its first round (the rotation lands between the rounds)."""
        page = self._user("viewer", "output", self.project, run, "")
        data = b"".join(base64.b64decode(c["data"]) for c in page["chunks"] if c["stream"] == "stdout")
        return data.count(b"\n") >= len(FORMS)

    async def _stale_calls(self) -> None:
        """A Worker of another pool, with its own valid session, sends a starting ACK for every live Attempt."""
        with psycopg.connect(self.dsn()) as conn:
            live = conn.execute(
                "select r.project_id, a.run_id, a.id, a.offer_id, l.lease_generation from ql.run_attempts a"
                " join ql.runs r on r.id = a.run_id"
                " join ql.run_leases l on l.attempt_id = a.id where a.status in ('starting', 'running')"
            ).fetchall()
        creds = FileCredentials(self.stale_certs.certificate, self.stale_certs.key, self.env.ca())
        client = IngressClient(self.shell.origin, self.stale_id, creds)
        try:
            session = await client.open_session(capacity=1, generation=1)
            for project, run, attempt, offer, generation in live:
                token = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()  # not this Attempt's
                body = ActivationRequest(worker_generation=1, project_id=str(project), run_id=str(run),
                                         attempt_id=str(attempt), lease_generation=int(generation),
                                         lease_token=token)  # fmt: skip
                self.found.stale_calls += 1
                try:
                    answer = await client.activate(session, str(offer), "starting", body)
                except ClientError:
                    continue  # refused: what must happen
                if answer.secrets:
                    self.found.deliveries_to_stale_workers += 1
        finally:
            await client.close()

    # -- the search -----------------------------------------------------------------------------------

    def search(self) -> None:
        """Every value, in every encoding, in every place; and every printed form masked in the stored output."""
        for name, run in self.found_runs().items():
            if name not in self.values:
                continue  # the control
            page = self._user("owner", "output", self.project, run, "")
            stored = b"".join(base64.b64decode(c["data"]) for c in page["chunks"])
            for label, _, form in FORMS:
                self.found.mask_cases += 1
                if form(self.values[name]) in stored:
                    self.found.mask_misses.append(f"{name} {label}")
            self.found.mask_cases += 1  # the file's content, on stderr
            if self.values[name] in stored:
                self.found.mask_misses.append(f"{name} file")
        for run in self.found_runs().values():
            self._user("owner", "show", self.project, run)
            self._user("viewer", "show", self.project, run)
        self._user("viewer", "secrets", self.project)
        self._user("operator", "tasks", self.project)
        self._user("viewer", "list_runs", self.project, "")
        places: dict[str, bytes] = {
            "postgresql log": self.cluster.log_file.read_bytes()[self.log_offset :],
            "pg_dump --data-only": subprocess.run(
                [str(server_bindir() / "pg_dump"), "--data-only", "-d", self.dsn()], check=True, capture_output=True
            ).stdout,
            "shell log": self.shell.log.read_bytes(),
            "user API answers": b"\n".join(self.answers),
        }
        with psycopg.connect(self.dsn()) as conn:
            events = conn.execute("select coalesce(string_agg(e::text, E'\\n'), '') from ql.run_events e").fetchone()
            places["events"] = str(events[0] if events else "").encode()
        for path in sorted(self.worker_folder.rglob("*")):
            if path.is_file():
                places[f"worker file {path.relative_to(self.worker_folder)}"] = path.read_bytes()
        store = load_worker_config(self.worker_folder / "worker.toml").secret_store  # where secret files lived
        for path in sorted(store.rglob("*")) if store is not None else ():
            if path.is_file():
                places[f"secret store file {path.name}"] = path.read_bytes()
        self.found.places_searched = len(places)
        self.found.control_found_in = [where for where, data in places.items() if self.control.encode() in data]
        for name, value in self.values.items():
            for pattern in patterns([value]):
                for where, data in places.items():
                    if pattern in data:
                        self.found.hits.append(f"{name} in {where}")

    def found_runs(self) -> dict[str, str]:
        with psycopg.connect(self.dsn()) as conn:
            rows = conn.execute(
                "select t.name, r.id from ql.runs r join ql.tasks t on t.id = r.task_id order by t.name"
            ).fetchall()
        return {f"LEAK_{str(n).removeprefix('leak-')}" if n != "control" else "CONTROL": str(r) for n, r in rows}


def run_leaks(root: Path, config: LeakConfig, place: Place | None = None) -> Found:
    """Set up and run; stop the Worker (its files are final); search with the shell and PostgreSQL still up;
    stop everything. The findings. On a cluster of its own (deployed by sqitch here), or in a copy of `place`'s
    template on that running cluster, which must log every statement as the engine's own does."""
    leaks = Leaks(root, config, place)
    try:
        leaks.start()
        leaks.run()
        leaks.stop_worker()
        leaks.search()
    except ApiError as exc:
        raise RuntimeError(f"a user API call was refused: {exc}") from None
    finally:
        leaks.stop()
    return leaks.found
