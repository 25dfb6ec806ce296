"""Bundles and signed plans on real parts, attacked: a cluster of its own, the real shell (`qinglong shell serve`),
a real `qinglong-worker run` that trusts one operator key and requires signed plans, and the operator CLI as a
child process. The honest path: `qinglong task create --bundle FOLDER --sign KEY` ships a folder with a script
and `fetch_mib` MiB of data; two Runs of it run the script from the bundle (the second from the Worker's cache:
`cache_hit_runs`), and the first one's fetch is timed by database time (`fetch_mib_per_s`). Then the attacks,
each a task whose command would write a marker file if it ever started:

- bundles (`bundle_attacks_*`), stored as a DBA would store them, each under a plan signed by the trusted key:
  tar-slip (`../`, `a/../../`), an absolute path, a symlink, a hard link, a character device, a fifo, a file
  count bomb, a size bomb, a compression bomb, a truncated archive, random bytes, a duplicate entry, chunks
  changed in the database after sealing (digest mismatch) and a bundle swapped after signing;
- plans (`unsigned_plans_*`): unsigned, signed by an unknown key, argv edited in the database after signing, the
  bundle digest edited after signing, a signed plan copied into another Project.

Each must end as a start failure with its code, nothing spawned (no marker), and nothing written outside the
Run's directory (the escape targets stay absent). `counts()` gives bench/results.json `bundles`.

Touches: `root` (the cluster, the PKI, the keys, the shell's and the Worker's folders), loopback ports and the
processes it starts (stopped at the end).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.request
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from qinglong.cli import admin, pki
from qinglong.cli import operators as op
from qinglong.cli.api import UserApi
from qinglong.devdb import Cluster
from qinglong.wire.bundle import CHUNK_BYTES, MAX_ENTRIES
from qinglong.wire.common import ENDED_RUN_STATUSES, token_digest
from qinglong.wire.offer import Plan
from qinglong.wire.signing import load_private_key, sign, write_private_key
from tests.support.env import REPO, Place, ShellProcess, new_env, start_and_deploy, start_worker, stop_process
from tests.support.progress import say
from tests.support.tarballs import archive, member

DATABASE = "bundles"


@dataclass(frozen=True)
class BundleConfig:
    fetch_mib: int = 16
    fsync: bool = False
    within_s: float = 180.0


@dataclass
class Found:
    bundle_attacks: dict[str, str] = field(default_factory=dict)  # name → the Attempt's error code
    plan_attacks: dict[str, str] = field(default_factory=dict)
    spawned: list[str] = field(default_factory=list)  # attacks whose marker exists
    escaped: list[str] = field(default_factory=list)  # escape targets that exist
    honest: dict[str, str] = field(default_factory=dict)  # run → status
    honest_output_ok: int = 0
    fetch_mib: float = 0.0
    fetch_s: float = 0.0
    direct_s: float = 0.0  # the same bytes selected over one psycopg connection
    cache_hit_runs: int = 0

    def counts(self) -> dict[str, Any]:
        """The figures of bench/results.json `bundles`, and what they were measured over."""
        spawned_bundles = [a for a in self.spawned if a in self.bundle_attacks]
        return {
            "bundle_attacks_tried": len(self.bundle_attacks),
            "bundle_attacks_spawned": len(spawned_bundles),
            "unsigned_plans_tried": len(self.plan_attacks),
            "unsigned_plans_spawned": len(self.spawned) - len(spawned_bundles),
            "fetch_mib": round(self.fetch_mib, 1),
            "fetch_mib_per_s": round(self.fetch_mib / self.fetch_s, 1) if self.fetch_s > 0 else 0.0,
            "cache_hit_runs": self.cache_hit_runs,
            "fetch_vs_direct_sql": round(self.direct_s / self.fetch_s, 3) if self.fetch_s > 0 else 0.0,
            "escapes": len(self.escaped),
            "honest_runs_succeeded": self.honest_output_ok,
            "refusals": {**self.bundle_attacks, **self.plan_attacks},
        }


class BundleAttacks:
    def __init__(self, root: Path, config: BundleConfig, place: Place | None = None) -> None:
        self.root, self.config, self.place = root, config, place
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o755)
        self.cluster = place.cluster if place else Cluster(root / "pg", fsync=config.fsync, preload_cron=False)
        self.database = DATABASE
        self.found = Found()
        self.markers = root / "markers"  # where a started attack task would write
        self.worker_proc: subprocess.Popen[bytes] | None = None

    def dsn(self) -> str:
        return self.cluster.dsn(self.database)

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """As a DBA (the attacker's reach): one statement, committed."""
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    # -- set-up ---------------------------------------------------------------------------------------

    def start(self) -> None:
        if self.place is not None:
            self.database = self.place.new_database(DATABASE)
        else:
            start_and_deploy(self.cluster, DATABASE)
        self.sql("update ql.settings set lease_ttl_ms = 5000, offer_ttl_ms = 10000")
        self.env = env = new_env(self.root, self.cluster)
        self.shell = ShellProcess(env, self.database)
        dsn = self.dsn()
        self.project = admin.call(dsn, op.project_create_v1, p_name="bundles")["projectId"]
        self.other_project = admin.call(dsn, op.project_create_v1, p_name="elsewhere")["projectId"]
        token = uuid.uuid4().hex
        subject = admin.call(dsn, op.subject_create_v1, p_kind="user", p_name="bundles-operator",
                             p_token_digest=token_digest(token))["subjectId"]  # fmt: skip
        for project in (self.project, self.other_project):
            admin.call(dsn, op.role_binding_set_v1, p_project_id=project, p_subject_id=subject, p_role="operator",
                       p_active=True)  # fmt: skip
        for keys in ("keys", "rogue"):
            (self.root / keys).mkdir()
        self.key = write_private_key(self.root / "keys" / "ops.key")
        self.rogue = write_private_key(self.root / "rogue" / "rogue.key")  # a key no Worker trusts
        worker_id = str(uuid.uuid4())
        issued = pki.issue_worker(env.certs, worker_id, name="bundles-worker")
        admin.call(dsn, op.worker_enroll_v1, p_worker_id=worker_id, p_name="bundles-worker", p_pool="default",
                   p_cert_fingerprint=issued.fingerprint)  # fmt: skip
        self.shell.start()
        self.api = UserApi(f"https://127.0.0.1:{self.shell.user_port}", token, env.ca())
        folder = self.worker_folder = self.root / "worker"
        folder.mkdir()
        self.work_dir = folder / "runs"
        (folder / "worker.toml").write_text(
            f'origin = "{self.shell.origin}"\nworker_id = "{worker_id}"\ngeneration = 1\ncapacity = 4\n'
            f'certificate = "{issued.certificate}"\nkey = "{issued.key}"\ntrust_anchors = "{env.ca()}"\n'
            f'journal = "{folder}/inbox.sqlite"\nwork_dir = "{self.work_dir}"\ntick_seconds = 0.2\n'
            f'stop_grace_seconds = 2.0\ntrusted_plan_keys = ["{self.key.public}"]\nrequire_signed_plans = true\n'
            "keep_files_seconds = 86400\n"  # what every Run left is inspected after the attacks
            + ("allow_root_tasks = true\n" if os.geteuid() == 0 else "")
        )
        self.markers.mkdir()
        self.markers.chmod(0o777)
        self.worker_proc = start_worker(folder / "worker.toml", folder / "worker.log")

    def stop(self) -> None:
        if self.worker_proc is not None:
            stop_process(self.worker_proc)
        if hasattr(self, "shell"):
            self.shell.stop()
        if self.place is None:
            self.cluster.stop()
        elif self.database != DATABASE:
            self.place.drop_database(self.database)

    # -- helpers --------------------------------------------------------------------------------------

    def store(self, data: bytes) -> str:
        """Store bytes as a sealed bundle the way a DBA could (no checks): its digest."""
        digest = hashlib.sha256(data).hexdigest()
        count = max(1, -(-len(data) // CHUNK_BYTES))
        self.sql("insert into ql.bundles (digest, size_bytes, chunk_count, entries, complete, created_at_ms)"
                 " values (%s, %s, %s, '[]', true, ql.now_ms()) on conflict do nothing",
                 (digest, len(data), count))  # fmt: skip
        for i in range(count):
            self.sql("insert into ql.bundle_chunks (digest, idx, data) values (%s, %s, %s) on conflict do nothing",
                     (digest, i, data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]))  # fmt: skip
        return digest

    def marker_argv(self, name: str) -> list[str]:
        return ["sh", "-c", f"touch {self.markers / name}"]

    def task(self, name: str, plan: dict[str, Any], *, key: Path | None, project: str | None = None) -> str:
        """A task created through the operator function (signed with `key` for `project`, or unsigned): its id."""
        project = project or self.project
        stored = Plan.from_obj(plan).to_obj()
        signature = None if key is None else sign(load_private_key(key), project, Plan.from_obj(stored)).to_obj()
        created = admin.call(self.dsn(), op.task_create_v1, p_project_id=project, p_name=name, p_plan=stored,
                             p_plan_signature=signature)  # fmt: skip
        return str(created["taskId"])

    def enqueue(self, task_id: str, project: str | None = None) -> str:
        return str(self.api.enqueue(project or self.project, task_id)["runId"])

    def wait(self, runs: dict[str, str]) -> dict[str, tuple[str, str | None]]:
        """Each Run's status and its last Attempt's error code, once every Run ended (or the time is up)."""
        deadline = time.monotonic() + self.config.within_s
        while True:
            rows = self.sql(
                "select r.id::text, r.status, (select a.error_code from ql.run_attempts a where a.run_id = r.id"
                " order by a.attempt_no desc limit 1) from ql.runs r where r.id = any(%s::uuid[])",
                (list(runs.values()),),
            )
            found = {run: (status, code) for run, status, code in rows}
            if all(s in ENDED_RUN_STATUSES for s, _ in found.values()) or time.monotonic() > deadline:
                return {name: found.get(run, ("missing", None)) for name, run in runs.items()}
            time.sleep(0.3)

    # -- the honest path ------------------------------------------------------------------------------

    def honest(self) -> None:
        source = self.root / "scripts"
        (source / "app").mkdir(parents=True)
        (source / "app" / "run.sh").write_text('#!/bin/sh\nprintf "from the bundle: %s\\n" "$(cat greeting.txt)"\n'
                                                "wc -c < data.bin\n")  # fmt: skip
        (source / "app" / "run.sh").chmod(0o755)
        (source / "app" / "greeting.txt").write_text("hello")
        (source / "app" / "data.bin").write_bytes(hashlib.shake_256(b"data").digest(self.config.fetch_mib << 20))
        created = subprocess.run(
            [sys.executable, "-m", "qinglong.cli", "task", "create", "--dsn", self.dsn(), "--project", "bundles",
             "--name", "honest", "--bundle", str(source), "--sign", str(self.key.private), "--cwd", "app", "--json",
             "--", "./run.sh"],
            check=True, capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        task_id = str(json.loads(created.stdout)["taskId"])
        first = self.enqueue(task_id)
        ended = self.wait({"first": first})
        served = self.chunks_served()
        second = self.enqueue(task_id)
        ended |= self.wait({"second": second})
        self.found.honest = {name: status for name, (status, _) in ended.items()}
        expected = f"from the bundle: hello\n{self.config.fetch_mib << 20}\n".encode()
        for run in (first, second):
            page = self.api.output(self.project, run, "")
            out = b"".join(base64.b64decode(c["data"]) for c in page["chunks"] if c["stream"] == "stdout")
            self.found.honest_output_ok += out == expected
        ((claimed, starting),) = self.sql(
            "select min(a.claimed_at_ms), min(a.started_at_ms) from ql.run_attempts a where a.run_id = %s",
            (first,),
        )
        size = self.sql("select size_bytes from ql.bundles order by size_bytes desc limit 1")[0][0]
        self.found.fetch_mib = size / (1 << 20)
        self.found.fetch_s = max((starting - claimed) / 1000, 0.001)
        self.found.cache_hit_runs = int(self.chunks_served() == served and ended["second"][0] == "succeeded")
        started = time.monotonic()  # the peer: the same chunks read straight from PostgreSQL by one connection
        chunks = self.sql("select data from ql.bundle_chunks where digest = (select digest from ql.bundles"
                          " order by size_bytes desc limit 1) order by idx")  # fmt: skip
        read = sum(len(data) for (data,) in chunks)
        self.found.direct_s = max(time.monotonic() - started, 0.001) * size / max(read, 1)

    def chunks_served(self) -> float:
        """Bundle chunks the shell has answered (its metrics, by route)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.shell.admin_port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("qinglong_shell_requests_total{") and 'route="worker.bundle_chunks"' in line
                   and 'status="200"' in line)  # fmt: skip

    # -- the attacks ----------------------------------------------------------------------------------

    def attacks(self) -> None:
        escape = self.root / "escape"  # every escape target is a name starting with this
        slip = archive(member("../../../escape-slip", content=b"x"))
        bundles: dict[str, bytes] = {
            "tar-slip": slip,
            "tar-slip-nested": archive(member("a/../../../../escape-nested", content=b"x")),
            "absolute-path": archive(member(f"{escape}-absolute", content=b"x")),
            "symlink": archive(
                member("link", tarfile.SYMTYPE, link=f"{escape}-symlink"), member("link/f", content=b"x")
            ),
            "hardlink": archive(member("hard", tarfile.LNKTYPE, link="/etc/passwd")),
            "device": archive(member("tty", tarfile.CHRTYPE)),
            "fifo": archive(member("fifo", tarfile.FIFOTYPE)),
            "file-count-bomb": archive(*(member(f"f{i}") for i in range(MAX_ENTRIES + 1))),
            "size-bomb": _bomb(600 << 20, b"x" * 1024),  # a header that claims 600 MiB
            "compression-bomb": _bomb(50 << 20, bytes(50 << 20)),
            "truncated": archive(member("run.sh", content=os.urandom(4096)))[:2000],
            "random-bytes": os.urandom(4096),
            "duplicate-entry": archive(member("run.sh", content=b"a"), member("run.sh", content=b"b")),
        }
        runs: dict[str, str] = {}
        for name, data in bundles.items():
            plan = {"argv": self.marker_argv(name), "bundle": self.store(data)}
            runs[name] = self.enqueue(self.task(name, plan, key=self.key.private))
        good = archive(member("run.sh", content=b"echo good\n", mode=0o755))
        evil = archive(member("run.sh", content=f"touch {self.markers}/chunks-changed\n".encode(), mode=0o755))
        for name, change in (("chunks-changed", "flip"), ("bundle-swapped", "swap")):
            digest = self.store(good if change == "flip" else archive(member("x", content=name.encode())))
            task = self.task(name, {"argv": self.marker_argv(name), "bundle": digest}, key=self.key.private)
            if change == "flip":  # a byte of the stored archive changed after it was sealed and signed
                self.sql("update ql.bundle_chunks set data = overlay(data placing '\\x00'::bytea from 20)"
                         " where digest = %s", (digest,))  # fmt: skip
            else:  # the whole archive replaced under the signed digest
                self.sql("update ql.bundle_chunks set data = %s where digest = %s and idx = 0", (evil, digest))
                self.sql("update ql.bundles set size_bytes = %s where digest = %s", (len(evil), digest))
            runs[name] = self.enqueue(task)
        self.found.bundle_attacks = self._outcomes(runs)

        plans: dict[str, str] = {
            "unsigned": self.enqueue(self.task("unsigned", {"argv": self.marker_argv("unsigned")}, key=None)),
            "unknown-key": self.enqueue(
                self.task("unknown-key", {"argv": self.marker_argv("unknown-key")}, key=self.rogue.private)
            ),
        }
        harmless = self.task("argv-edited", {"argv": ["true"]}, key=self.key.private)
        self._edit_plan(harmless, {"argv": self.marker_argv("argv-edited")})
        plans["argv-edited"] = self.enqueue(harmless)
        signed = self.task("bundle-edited", {"argv": self.marker_argv("bundle-edited"), "bundle": self.store(good)},
                           key=self.key.private)  # fmt: skip
        self._edit_plan(signed, {"bundle": self.store(evil)})
        plans["bundle-edited"] = self.enqueue(signed)
        plan = {"argv": self.marker_argv("copied-to-another-project")}
        copied = Plan.from_obj(plan).to_obj()
        signature = sign(load_private_key(self.key.private), self.project, Plan.from_obj(copied)).to_obj()
        moved = admin.call(self.dsn(), op.task_create_v1, p_project_id=self.other_project, p_name="copied",
                           p_plan=copied, p_plan_signature=signature)  # fmt: skip
        plans["copied-to-another-project"] = self.enqueue(str(moved["taskId"]), self.other_project)
        self.found.plan_attacks = self._outcomes(plans)
        self.found.spawned = sorted(p.name for p in self.markers.iterdir())
        self.found.escaped = sorted(str(p) for p in self.root.rglob("escape*"))

    def _edit_plan(self, task_id: str, changes: dict[str, Any]) -> None:
        """What a DBA (or a stolen operator DSN) can do: change a signed revision's plan in place."""
        self.sql("alter table ql.task_execution_revisions disable trigger task_execution_revisions_immutable")
        try:
            self.sql("update ql.task_execution_revisions set plan_json = plan_json || %s::jsonb"
                     " where id = (select current_revision_id from ql.tasks where id = %s)",
                     (json.dumps(changes), task_id))  # fmt: skip
        finally:
            self.sql("alter table ql.task_execution_revisions enable trigger task_execution_revisions_immutable")

    def _outcomes(self, runs: dict[str, str]) -> dict[str, str]:
        """Each attack's end: the start failure's code when it failed so, else `<status>/<code>`."""
        ended = self.wait(runs)
        return {
            name: code if status == "failed" and code else f"{status}/{code}" for name, (status, code) in ended.items()
        }


def _bomb(claimed: int, data: bytes) -> bytes:
    """A gzip tar whose one header claims `claimed` bytes, followed by `data` (deflated a MiB at a time)."""
    info, _ = member("bomb")
    info.size = claimed
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflate.compress(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))]
    parts += [deflate.compress(data[i : i + (1 << 20)]) for i in range(0, len(data), 1 << 20)]
    return b"".join([*parts, deflate.flush()])


def run_bundle_attacks(root: Path, config: BundleConfig, place: Place | None = None) -> Found:
    """Set up, run the honest path and the attacks, stop everything. The findings. On a cluster of its own
    (deployed by sqitch here), or in a copy of `place`'s template on that running cluster."""
    engine = BundleAttacks(root, config, place)
    try:
        engine.start()
        say(f"bundles: honest task with a {config.fetch_mib} MiB bundle, signed, run twice")
        engine.honest()
        say("bundles: attacks")
        engine.attacks()
    finally:
        engine.stop()
    return engine.found
