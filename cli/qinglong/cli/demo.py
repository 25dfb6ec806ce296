"""`make demo`: the embedded demo — the real control plane on this machine, end to end.
Touches a temporary folder (removed at the end), its own PostgreSQL 15 (fsync on, pg_cron
preloaded), loopback ports, and the processes it starts (the shell, a Worker and their tasks).

It deploys with sqitch, makes a PKI, enrols a Worker, starts `qinglong shell serve` and
`qinglong-worker run` as real processes, queues four Runs through the user API and drives them:
one succeeds; one passes its timeoutMs and is stopped through stop_requested (timed_out); one is
cancelled through the user API (cancelled); one survives a SIGKILL of its Worker and a restart
(succeeded). It prints live progress, each Run's event timeline, the pg_cron job and one summary.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

from qinglong.cli import admin, pki
from qinglong.cli.api import UserApi, token_digest
from qinglong.cli.timeline import render
from qinglong.db import sqitch
from qinglong.devdb import Cluster

TERMINAL = ("succeeded", "failed", "cancelled", "timed_out")
EXPECTED = {
    "hello": "succeeded",
    "too-slow": "timed_out",
    "cancel-me": "cancelled",
    "survivor": "succeeded",
    "unserved": "cancelled",
}
TASKS: dict[str, tuple[list[str], int]] = {
    "hello": (["sh", "-c", "echo hello from a Qinglong task; sleep 1"], 60000),
    "too-slow": (["sleep", "120"], 3000),
    "cancel-me": (["sleep", "120"], 60000),
    "survivor": (["sh", "-c", "sleep 8; echo I outlived my Worker; exit 0"], 60000),
}
UNSERVED = "unserved"  # a task of a pool no Worker serves: its cancellation is pg_cron's to converge


def say(text: str) -> None:
    print(text, flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(what: str, check: Callable[[], bool], within: float) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: gave up waiting for {what}")
        time.sleep(0.3)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:  # noqa: S310 - loopback http
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class Demo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cluster = Cluster(root / "pg", fsync=True, cron_database="qinglong", settings={"cron.host": "127.0.0.1"})
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.cluster.stop()

    def run(self) -> int:
        root = self.root
        say(f"• PostgreSQL 15 in {root / 'pg'} (fsync on, pg_cron preloaded)")
        self.cluster.start()
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            conn.execute("create database qinglong")
        dsn = self.cluster.dsn("qinglong")
        subprocess.run(sqitch("deploy", "--quiet", self.cluster.sqitch_target("qinglong")), check=True)
        say("• sqitch deploy: done (schema ql, API ql_api, the pg_cron job 'qinglong-converge')")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("update ql.settings set lease_ttl_ms = 4000, offer_ttl_ms = 10000")

        certs = root / "pki"
        pki.init_ca(certs)
        pki.issue_server(certs, ["127.0.0.1"])
        worker_id = str(uuid.uuid4())
        issued = pki.issue_worker(certs, worker_id, name="worker")
        admin.call(dsn, "worker_enroll_v1", (worker_id, "demo-worker", "default", issued.fingerprint))
        project = admin.call(dsn, "project_create_v1", ("demo",))["projectId"]
        token = os.urandom(24).hex()
        subject = admin.call(dsn, "subject_create_v1", ("user", "demo-operator", token_digest(token)))["subjectId"]
        admin.call(dsn, "role_binding_set_v1", (project, subject, "operator", True))
        tasks = {
            name: admin.call(dsn, "task_create_v1", (project, name, {"argv": argv, "timeoutMs": timeout}))["taskId"]
            for name, (argv, timeout) in TASKS.items()
        }
        plan = {"argv": ["true"], "pool": "nobody"}
        tasks[UNSERVED] = admin.call(dsn, "task_create_v1", (project, UNSERVED, plan))["taskId"]
        say(f"• PKI (ECDSA P-256) in {certs}; Worker {worker_id} enrolled; project 'demo', {len(tasks)} tasks")

        worker_port, user_port, admin_port = free_port(), free_port(), free_port()
        secret = root / "cluster.secret"
        secret.write_text(os.urandom(32).hex())
        secret.chmod(0o600)
        (root / "shell.toml").write_text(
            f'[database]\ndsn = "host=127.0.0.1 port={self.cluster.port} user=ql_runtime dbname=qinglong"\n'
            f'[secret]\ncluster_secret_file = "{secret}"\n'
            f'[worker_listener]\nhost = "127.0.0.1"\nport = {worker_port}\ncertificate = "{certs}/server.crt"\n'
            f'key = "{certs}/server.key"\nclient_ca = "{certs}/ca.crt"\n'
            f'[user_listener]\nhost = "127.0.0.1"\nport = {user_port}\ncertificate = "{certs}/server.crt"\n'
            f'key = "{certs}/server.key"\n[admin_listener]\nhost = "127.0.0.1"\nport = {admin_port}\n'
        )
        self.spawn(
            "shell", [sys.executable, "-m", "qinglong.cli", "shell", "serve", "--config", str(root / "shell.toml")]
        )
        wait_until("the shell", lambda: healthy(f"http://127.0.0.1:{admin_port}/healthz"), 30)
        say(f"• shell: worker ingress :{worker_port} (TLS 1.3 mTLS), user API :{user_port}, admin :{admin_port}")

        (root / "worker.toml").write_text(
            f'origin = "https://127.0.0.1:{worker_port}"\nworker_id = "{worker_id}"\ngeneration = 1\ncapacity = 4\n'
            f'certificate = "{issued.certificate}"\nkey = "{issued.key}"\ntrust_anchors = "{certs}/ca.crt"\n'
            f'journal = "{root}/worker/inbox.sqlite"\nwork_dir = "{root}/worker/runs"\ntick_seconds = 0.5\n'
            "stop_grace_seconds = 2.0\n" + ("allow_root_tasks = true\n" if os.geteuid() == 0 else "")
            # A Worker refuses tasks that would run as root unless told: the demo runs as root on a
            # throw-away machine (docs/operations.md §5, "Where and as whom a task runs").
        )
        worker_argv = [sys.executable, "-m", "qinglong.worker", "run", "--config", str(root / "worker.toml")]
        self.spawn("worker", worker_argv)
        say("• Worker started (qinglong-worker run)")

        api = UserApi(f"https://127.0.0.1:{user_port}", token, certs / "ca.crt")
        runs = {name: api.enqueue(project, task)["runId"] for name, task in tasks.items()}
        say("• queued through the user API: " + ", ".join(f"{n} {r[:8]}" for n, r in runs.items()))

        def status(name: str) -> str:
            return str(api.show(project, runs[name])["run"]["status"])

        answer = api.cancel(project, runs[UNSERVED])
        say(f"• unserved: user cancellation {answer['status']} — no Worker holds it: pg_cron's convergence ends it")
        wait_until("cancel-me to run", lambda: status("cancel-me") == "running", 60)
        answer = api.cancel(project, runs["cancel-me"])
        say(f"• cancel-me: user cancellation {answer['status']} (the Worker stops it at its next lease control)")

        wait_until("survivor to run", lambda: status("survivor") == "running", 60)
        time.sleep(1.5)
        self.procs["worker"].send_signal(signal.SIGKILL)
        self.procs["worker"].wait()
        say("• survivor: the Worker was killed with SIGKILL while the task runs; restarting it…")
        time.sleep(1.0)
        self.spawn("worker", worker_argv)

        started = time.monotonic()
        last = ""
        while True:
            states = {name: status(name) for name in runs}
            line = "  " + "  ".join(f"{n}={s}" for n, s in states.items())
            if line != last:
                say(f"{line}   (+{time.monotonic() - started:.0f}s)")
                last = line
            if all(s in TERMINAL for s in states.values()):
                break
            if states[UNSERVED] not in TERMINAL and all(s in TERMINAL for n, s in states.items() if n != UNSERVED):
                line += "   waiting for pg_cron's next minute"
            if time.monotonic() - started > 150:
                say("demo: Runs did not end within 150 s")
                break
            time.sleep(0.5)

        say("")
        for name, run in runs.items():
            say(render(api.show(project, run), title=f"[{name}]"))
            say("")
        with psycopg.connect(dsn) as conn:
            job = conn.execute(
                "select jobname, schedule, username, command from cron.job where jobname = 'qinglong-converge'"
            ).fetchone()
            runs_done = conn.execute(
                "select count(*), count(*) filter (where status = 'succeeded') from cron.job_run_details"
            ).fetchone()
        say(f"• pg_cron: job {job} — runs so far {runs_done} (minute cadence, as role ql_scheduler)")
        results = {name: status(name) for name in runs}
        ok = results == EXPECTED
        summary = ", ".join(f"{n} {s}" for n, s in results.items())
        say(f"{'PASS' if ok else 'FAIL'}: {summary}")
        return 0 if ok else 1


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="qinglong-demo-", dir="/tmp"))
    root.chmod(0o755)
    demo = Demo(root)
    try:
        return demo.run()
    finally:
        demo.stop_all()
        if os.environ.get("QINGLONG_DEMO_KEEP"):
            say(f"(kept {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
