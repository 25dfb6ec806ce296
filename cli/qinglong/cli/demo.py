"""`make demo`: the embedded demo — the real control plane on this machine, end to end — and `make
sandbox`, the same system left running for your own commands.
Touches a temporary folder (removed at the end), its own PostgreSQL (fsync on, pg_cron
preloaded), loopback ports, and the processes it starts (the shell, a Worker and their tasks).

Both deploy with sqitch, make a PKI, enrol a Worker (`demo-worker`, pool `default`) and start
`qinglong shell serve` and `qinglong-worker run` as real processes. The demo then queues Runs through
the user API and drives them: one succeeds and its output is read back (`run logs`); one passes its
timeoutMs and is stopped through stop_requested (timed_out); one is cancelled through the user API
(cancelled); one survives a SIGKILL of its Worker and a restart (succeeded); one waits in a pool no
Worker serves and is cancelled (ended by pg_cron's convergence); one uses a project secret and prints it
(stored masked); one runs a script shipped as a bundle (`qinglong task create --bundle --sign`); and a
scheduled task fires at pg_cron's next whole minute. The Worker requires signed plans: every task's plan is
signed with the demo's operator key. It prints live progress, each Run's event timeline, the pg_cron job and
one summary, and the web console's URL with a viewer's token; with QINGLONG_DEMO_KEEP=1 the system stays up
until Ctrl-C or SIGTERM, and the folder is kept.

`--sandbox -- COMMAND…` runs COMMAND (default: your $SHELL) in a fresh folder with the system up and
QINGLONG_DSN (a DBA connection), QINGLONG_API, QINGLONG_CA, QINGLONG_PKI and QINGLONG_PLAN_KEY (so `task
create` signs) set, then tears it all down
and exits with COMMAND's status: README.md's tour runs in it, and a test runs the tour there verbatim.
"""

from __future__ import annotations

import argparse
import base64
import json
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
from typing import Any

import psycopg

from qinglong.cli import admin, pki
from qinglong.cli import operators as op
from qinglong.cli.api import UserApi
from qinglong.cli.printing import plural
from qinglong.cli.timeline import render
from qinglong.db import sqitch
from qinglong.devdb import Cluster
from qinglong.shell.sealing import new_kek
from qinglong.wire.common import ENDED_RUN_STATUSES, token_digest
from qinglong.wire.offer import Plan
from qinglong.wire.signing import load_private_key, sign, write_private_key

EXPECTED = {
    "hello": "succeeded",
    "too-slow": "timed_out",
    "cancel-me": "cancelled",
    "survivor": "succeeded",
    "unserved": "cancelled",
    "tick": "succeeded",
    "uses-secret": "succeeded",
    "from-bundle": "succeeded",
}
TASKS: dict[str, tuple[list[str], int]] = {
    "hello": (["sh", "-c", "echo hello from a Qinglong task; sleep 1"], 60000),
    "too-slow": (["sleep", "120"], 3000),
    "cancel-me": (["sleep", "120"], 60000),
    "survivor": (["sh", "-c", "sleep 8; echo I outlived my Worker; exit 0"], 60000),
}
UNSERVED = "unserved"  # a task of a pool no Worker serves: its cancellation is pg_cron's to converge
SCHEDULED = "tick"  # a task on cron '* * * * *': pg_cron's convergence fires it at the next whole minute
TICK = ["sh", "-c", "echo tick: fired by its schedule at $(date -u +%H:%M:%S) UTC"]
BUNDLE_TASK = "from-bundle"  # a script shipped as a bundle, its plan signed by the operator's key
SECRET_TASK = "uses-secret"  # noqa: S105 - a task name. A task given a project secret as a variable and as a file; it prints both
SECRET_PLAN: dict[str, Any] = {
    "argv": ["sh", "-c", 'echo "variable: $API_TOKEN"; echo "file: $(cat token.txt)"'],
    "secretEnv": {"API_TOKEN": "DEMO_TOKEN"},
    "secretFiles": {"token.txt": "DEMO_TOKEN"},
    "timeoutMs": 60000,
}


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000))


def _stdout(page: dict[str, Any]) -> str:
    """The stdout chunks of one page of run output, as text, indented."""
    data = b"".join(base64.b64decode(c["data"]) for c in page["chunks"] if c["stream"] == "stdout")
    return "\n".join("  " + line for line in data.decode("utf-8", "replace").splitlines())


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
        with (self.root / f"{name}.log").open("ab") as log:  # the child keeps its own descriptor
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

    def start_system(self) -> None:
        """PostgreSQL, the schema, a PKI, an enrolled Worker, the shell and the Worker, all running."""
        root = self.root
        say(f"• PostgreSQL in {root / 'pg'} (fsync on, pg_cron preloaded)")
        self.cluster.start()
        with psycopg.connect(self.cluster.dsn(), autocommit=True) as conn:
            conn.execute("create database qinglong")
        self.dsn = dsn = self.cluster.dsn("qinglong")
        subprocess.run(sqitch("deploy", "--quiet", self.cluster.sqitch_target("qinglong")), check=True)
        say("• sqitch deploy: done (schema ql, API ql_api, the pg_cron job 'qinglong-converge')")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("update ql.settings set lease_ttl_ms = 4000, offer_ttl_ms = 10000")

        self.certs = certs = root / "pki"
        pki.init_ca(certs)
        pki.issue_server(certs, ["127.0.0.1"])
        worker_id = str(uuid.uuid4())
        issued = pki.issue_worker(certs, worker_id, name="worker")
        admin.call(dsn, op.worker_enroll_v1, p_worker_id=worker_id, p_name="demo-worker", p_pool="default",
                   p_cert_fingerprint=issued.fingerprint)  # fmt: skip
        say(f"• PKI (ECDSA P-256) in {certs}; Worker {worker_id} enrolled as demo-worker")

        worker_port, user_port, admin_port = free_port(), free_port(), free_port()
        self.api_origin = f"https://127.0.0.1:{user_port}"
        secret = root / "cluster.secret"
        secret.write_text(os.urandom(32).hex())
        secret.chmod(0o600)
        self.plan_key = write_private_key(root / "ops.key")  # the operator's plan key (qinglong pki plan-key new)
        kek = root / "secrets.kek"  # the key-encryption key of project secrets (qinglong secret keygen)
        kek.write_text(new_kek())
        kek.chmod(0o600)
        (root / "shell.toml").write_text(
            f'[database]\ndsn = "host=127.0.0.1 port={self.cluster.port} user=ql_runtime dbname=qinglong"\n'
            f'[secret]\ncluster_secret_file = "{secret}"\n[secrets]\nkek_file = "{kek}"\n'
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
            f'stop_grace_seconds = 2.0\ntrusted_plan_keys = ["{self.plan_key.public}"]\nrequire_signed_plans = true\n'
            + ("allow_root_tasks = true\n" if os.geteuid() == 0 else "")
            # A Worker refuses tasks that would run as root unless told: the demo runs as root on a
            # throw-away machine (docs/operations.md §5, "Where and as whom a task runs").
        )
        self.worker_argv = [sys.executable, "-m", "qinglong.worker", "run", "--config", str(root / "worker.toml")]
        self.spawn("worker", self.worker_argv)
        say("• Worker started (qinglong-worker run)")

    def create_task(self, project: str, name: str, given: dict[str, Any]) -> str:
        """A task whose plan is signed with the demo's operator key (its Worker runs no other): its id."""
        plan = Plan.from_obj(given).to_obj()  # what is signed is what is stored
        signature = sign(load_private_key(self.plan_key.private), project, Plan.from_obj(plan)).to_obj()
        return str(admin.call(self.dsn, op.task_create_v1, p_project_id=project, p_name=name, p_plan=plan,
                              p_plan_signature=signature)["taskId"])  # fmt: skip

    def create_from_bundle(self) -> str:
        """The bundle task, as an operator makes it: `qinglong task create --bundle FOLDER --sign KEY`."""
        scripts = self.root / "scripts"
        scripts.mkdir()
        (scripts / "hello.sh").write_text('printf "%s, from a bundle\\n" "$(cat message.txt)"\n')
        (scripts / "message.txt").write_text("hello")
        argv = ["task", "create", "--dsn", self.dsn, "--project", "demo", "--name", BUNDLE_TASK, "--bundle",
                str(scripts), "--sign", str(self.plan_key.private), "--json", "--", "sh", "hello.sh"]  # fmt: skip
        created = subprocess.run([sys.executable, "-m", "qinglong.cli", *argv], check=True, capture_output=True,
                                 text=True)  # fmt: skip
        say(f"• {BUNDLE_TASK}: qinglong {' '.join(argv[:3])} … --bundle scripts/ --sign ops.key -- sh hello.sh "
            f"(the folder packed, uploaded once, the plan signed)")  # fmt: skip
        return str(json.loads(created.stdout)["taskId"])

    def sandbox(self, argv: list[str]) -> int:
        """Run `argv` with the system up and the client's environment set; its exit status."""
        self.start_system()
        home = self.root / "home"
        home.mkdir()
        env = {**os.environ, "QINGLONG_DSN": self.dsn, "QINGLONG_API": self.api_origin,
               "QINGLONG_CA": str(self.certs / "ca.crt"), "QINGLONG_PKI": str(self.certs),
               "QINGLONG_PLAN_KEY": str(self.plan_key.private),
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip
        say(f"• sandbox: {' '.join(argv)} in {home} (QINGLONG_DSN, QINGLONG_API, QINGLONG_CA, QINGLONG_PKI set)")
        return subprocess.run(argv, cwd=home, env=env, check=False).returncode

    def run(self) -> int:
        self.start_system()
        dsn, certs, worker_argv = self.dsn, self.certs, self.worker_argv
        project = admin.call(dsn, op.project_create_v1, p_name="demo")["projectId"]
        token = os.urandom(24).hex()
        subject = admin.call(dsn, op.subject_create_v1, p_kind="user", p_name="demo-operator",
                             p_token_digest=token_digest(token))["subjectId"]  # fmt: skip
        admin.call(dsn, op.role_binding_set_v1, p_project_id=project, p_subject_id=subject, p_role="operator",
                   p_active=True)  # fmt: skip
        viewer = os.urandom(24).hex()  # for a person in the web console: it may look, not act
        seer = admin.call(dsn, op.subject_create_v1, p_kind="user", p_name="demo-viewer",
                          p_token_digest=token_digest(viewer))["subjectId"]  # fmt: skip
        admin.call(dsn, op.role_binding_set_v1, p_project_id=project, p_subject_id=seer, p_role="viewer", p_active=True)
        say(f"• web console: {self.api_origin}/console/ — project demo, viewer token {viewer} (the shell's "
            f"certificate is signed by the demo's own CA, {certs / 'ca.crt'})")  # fmt: skip
        owner = os.urandom(24).hex()  # sets the project secret (secret.write: owner and admin)
        keeper = admin.call(dsn, op.subject_create_v1, p_kind="user", p_name="demo-owner",
                            p_token_digest=token_digest(owner))["subjectId"]  # fmt: skip
        admin.call(dsn, op.role_binding_set_v1, p_project_id=project, p_subject_id=keeper, p_role="owner",
                   p_active=True)  # fmt: skip
        value = f"demo-token-{os.urandom(8).hex()}"
        stored = UserApi(self.api_origin, owner, certs / "ca.crt").set_secret(project, "DEMO_TOKEN", value.encode())
        say(
            f"• secret DEMO_TOKEN: version {stored['version']} sealed by the shell (the database holds only ciphertext)"
        )
        plans: dict[str, dict[str, Any]] = {name: {"argv": argv, "timeoutMs": t} for name, (argv, t) in TASKS.items()}
        plans[UNSERVED] = {"argv": ["true"], "pool": "nobody"}
        plans[SECRET_TASK] = SECRET_PLAN
        tasks = {name: self.create_task(project, name, plan) for name, plan in plans.items()}
        tasks[BUNDLE_TASK] = self.create_from_bundle()
        ticker = self.create_task(project, SCHEDULED, {"argv": TICK})
        fires = admin.call(dsn, op.task_schedule_set_v1, p_project_id=project, p_name=SCHEDULED, p_cron="* * * * *",
                           p_timezone="UTC", p_overlap="skip")  # fmt: skip
        say(f"• project 'demo': {plural(len(tasks), 'task')}, and '{SCHEDULED}' on cron '* * * * *' (first fire at "
            f"{_clock(fires['nextFireAtMs'])} UTC)")  # fmt: skip

        api = UserApi(self.api_origin, token, certs / "ca.crt")
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
            if SCHEDULED not in runs and (fired := api.list_runs(project, f"taskId={ticker}")["runs"]):
                runs[SCHEDULED] = fired[-1]["runId"]  # the first fire time's Run (its schedule fires each minute)
                say(f"• {SCHEDULED}: pg_cron's convergence fired its schedule: run {runs[SCHEDULED][:8]} queued")
            states = {name: status(name) for name in runs}
            line = "  " + "  ".join(f"{n}={s}" for n, s in states.items())
            if line != last:
                say(f"{line}   (+{time.monotonic() - started:.0f}s)")
                last = line
            if SCHEDULED in runs and all(s in ENDED_RUN_STATUSES for s in states.values()):
                break
            if time.monotonic() - started > 150:
                say("demo: Runs did not end within 150 s")
                break
            time.sleep(0.5)

        say("")
        for name, run in runs.items():
            say(render(api.show(project, run), title=f"[{name}]"))
            say("")
        for name in ("hello", SCHEDULED, SECRET_TASK, BUNDLE_TASK):
            say(f"• qinglong run logs --project demo --run {runs.get(name, '?')}   ({name}: its stdout, as stored)")
            say(_stdout(api.output(project, runs[name], "")) if name in runs else "  (did not fire)")
        printed = _stdout(api.output(project, runs[SECRET_TASK], ""))
        masked = value not in printed and printed.count("***") == 2
        say(f"• {SECRET_TASK}: the task printed its secret twice; stored output shows it masked: {masked}")
        with psycopg.connect(dsn) as conn:
            job = conn.execute(
                "select jobname, schedule, username, command from cron.job where jobname = 'qinglong-converge'"
            ).fetchone()
            runs_done = conn.execute(
                "select count(*), count(*) filter (where status = 'succeeded') from cron.job_run_details"
            ).fetchone()
        say(f"• pg_cron: job {job} — runs so far {runs_done} (minute cadence, as role ql_scheduler)")
        results = {name: status(name) for name in runs}
        if SCHEDULED not in results:
            results[SCHEDULED] = "not fired"
        bundled = _stdout(api.output(project, runs[BUNDLE_TASK], "")).strip() == "hello, from a bundle"
        say(f"• {BUNDLE_TASK}: the script came from the bundle, fetched and unpacked by the Worker: {bundled}")
        ok = results == EXPECTED and masked and bundled
        summary = ", ".join(f"{n} {s}" for n, s in results.items())
        say(f"{'PASS' if ok else 'FAIL'}: {summary}")
        return 0 if ok else 1


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qinglong.cli.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", action="store_true", help="run COMMAND with the system up, not the demo")
    parser.add_argument("command", nargs="*", metavar="COMMAND", help="with --sandbox: what to run (default $SHELL)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="qinglong-demo-", dir="/tmp"))
    root.chmod(0o755)
    demo = Demo(root)
    try:
        if args.sandbox:
            return demo.sandbox(args.command or [os.environ.get("SHELL", "/bin/sh")])
        status = demo.run()
        if os.environ.get("QINGLONG_DEMO_KEEP"):  # leave the system up for a person to look (the console above)
            say(f"• the system stays up (web console {demo.api_origin}/console/) until Ctrl-C (or SIGTERM)")
            for stop in (signal.SIGINT, signal.SIGTERM):  # even where SIGINT came ignored (a background job)
                signal.signal(stop, _interrupt)
            try:
                signal.pause()
            except KeyboardInterrupt:
                say("")
        return status
    finally:
        demo.stop_all()
        if os.environ.get("QINGLONG_DEMO_KEEP"):
            say(f"(kept {root})")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
