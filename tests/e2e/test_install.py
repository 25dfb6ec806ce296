"""Installing with real pip, as README.md "Installing outside the checkout" says: each install goes into
a fresh virtualenv made by this interpreter (`python -m venv`), from the wheels `make dist` builds
(scripts/dist.sh), third-party pins from the index pip is configured with. Nothing is editable and
nothing of the checkout is on the path.

- the Worker: cryptography from the index, then `pip install --no-index --find-links DIST
  qinglong-worker`: `qinglong-worker --help` works; the Worker's direct requirements are exactly
  cryptography and qinglong-wire, and every third-party distribution installed is one of them or in their
  dependency closure (aiohttp is not: the Worker has its own HTTP client)
  (computed from the venv's own importlib.metadata); psycopg and the control plane's packages are not
  importable; `qinglong-worker pki init` answers one line naming the qinglong-control distribution
  and exits 2. Then that installed Worker, as its own process, completes a Run against the real shell
  (the Worker integration tests' rig: tests/integration/worker/conftest.py).
- every wheel (`pip install DIST/*.whl`): from a folder outside the checkout, `qinglong db deploy`
  deploys the schema into an empty database of the session cluster and `qinglong db verify` passes;
  the sqitch project it used lies inside that venv.

pip needs its index for the third-party pins. An unreachable index FAILS these tests with a message
that says so: an install that cannot be shown is not a pass.

Touches: temporary folders (two virtualenvs, a working folder), pip's cache and index, the session
cluster (one scratch database, dropped after), the rig's fresh database, loopback ports, and the Worker
and task processes the rig starts (all cleaned up).
"""

from __future__ import annotations

import email
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from psycopg import sql

from qinglong.devdb import Cluster
from tests.integration.shell.conftest import pki as pki  # the session PKI, for the rig
from tests.integration.worker.conftest import ENDED_RUN, Rig, child_subreaper, poll
from tests.integration.worker.conftest import rig as rig  # the real shell, a fresh database, Worker processes

pytestmark = pytest.mark.e2e
REPO: Final = Path(__file__).resolve().parents[2]
PIP_TIMEOUT_S: Final = 600
OURS: Final = frozenset({"qinglong-worker", "qinglong-wire"})

# Run inside a venv: every installed distribution with its requirements, and where a module comes from.
DUMP: Final = """
import importlib.metadata, importlib.util, json, sys
print(json.dumps({
    "version": sys.version,
    "prefix": sys.prefix,
    "requires": {d.metadata["Name"]: d.requires or [] for d in importlib.metadata.distributions()},
    "origin": {name: getattr(importlib.util.find_spec(name), "origin", None) for name in sys.argv[1:]},
}))
"""


@dataclass(frozen=True)
class Venv:
    root: Path
    bootstrap: frozenset[str]  # what `python -m venv` put there before any install (pip, setuptools)
    install_seconds: float

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def dump(self, *modules: str, cwd: Path) -> dict[str, Any]:
        out = subprocess.run(
            [self.bin("python"), "-c", DUMP, *modules], cwd=cwd, check=True, capture_output=True, text=True
        )
        found: dict[str, Any] = json.loads(out.stdout)
        return found


def pip(folder: Path, *args: str) -> float:
    """`pip install -q <args>` in the venv at `folder`, in seconds; FAIL (not skip) if pip cannot reach what it
    needs."""
    started = time.monotonic()
    argv = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q", *args]
    shown = " ".join(a if not a.startswith("/") else Path(a).name for a in args)
    try:
        out = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`pip install {shown}` did not finish in {PIP_TIMEOUT_S} s: is the package index reachable?")
    if out.returncode != 0:
        tail = "\n".join(line for line in out.stderr.splitlines() if not line.startswith("WARNING: Location"))[-3000:]
        pytest.fail(f"`pip install {shown}` failed (exit {out.returncode}); is the package index reachable?\n{tail}")
    elapsed = time.monotonic() - started
    print(f"\npip install {shown}: {elapsed:.1f} s")
    return elapsed


def make_venv(folder: Path, *steps: tuple[str, ...]) -> Venv:
    """A fresh venv of this interpreter, then one `pip install` per step."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True, timeout=120)
    bootstrap = Venv(folder, frozenset(), 0.0).dump(cwd=folder)["requires"]
    elapsed = sum(pip(folder, *step) for step in steps)
    return Venv(folder, frozenset(canonicalize_name(n) for n in bootstrap), elapsed)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every wheel, built as `make dist` builds them (scripts/dist.sh)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(["bash", str(REPO / "scripts" / "dist.sh"), str(out)], check=True, capture_output=True)
    return out


def closure(root: str, requires: Mapping[str, list[str]]) -> set[str]:
    """Every distribution `root` needs, transitively, on this interpreter (markers evaluated, extras
    followed). A requirement that is not installed raises KeyError: pip would have installed it."""
    installed = {canonicalize_name(name): reqs for name, reqs in requires.items()}
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonicalize_name(root), frozenset[str]())]
    while todo:
        name, extras = todo.pop()
        for text in installed[name]:
            req = Requirement(text)
            if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
                continue
            key = (canonicalize_name(req.name), frozenset(req.extras))
            if key not in seen:
                seen.add(key)
                todo.append(key)
    return {name for name, _ in seen}


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder outside the checkout."""
    folder = tmp_path_factory.mktemp("cwd")
    assert not folder.resolve().is_relative_to(REPO)
    return folder


@pytest.fixture(scope="module")
def worker_venv(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> Venv:
    """As the README installs a Worker: cryptography from the index, then the Worker from the wheel
    folder with no index at all, so the wheels alone must resolve qinglong-wire by name."""
    pins = tuple(r.split(" ")[0] for r in wheel_requires(dist, "qinglong_worker") if not r.startswith("qinglong"))
    folder = tmp_path_factory.mktemp("worker-host") / "venv"
    return make_venv(folder, pins, ("--no-index", "--find-links", str(dist), "qinglong-worker"))


@pytest.fixture(scope="module")
def control_venv(tmp_path_factory: pytest.TempPathFactory, dist: Path) -> Venv:
    """Every wheel by its file (no qinglong-* name is asked of the index), third-party pins from the index."""
    return make_venv(tmp_path_factory.mktemp("control-host") / "venv", tuple(map(str, sorted(dist.glob("*.whl")))))


def wheel_requires(dist: Path, stem: str) -> list[str]:
    (wheel,) = dist.glob(f"{stem}-*.whl")
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(meta)).get_all("Requires-Dist") or []


def test_a_worker_install_is_the_worker_its_two_pins_and_their_closure_only(worker_venv: Venv, outside: Path) -> None:
    helped = subprocess.run([worker_venv.bin("qinglong-worker"), "--help"], cwd=outside, capture_output=True, text=True)
    assert helped.returncode == 0 and "Run a Qinglong remote Worker" in helped.stdout, helped.stderr
    assert {"run", "journal", "status"} <= set(re.findall(r"\b(run|journal|status)\b", helped.stdout))

    modules = (
        "qinglong.worker.run",
        "qinglong.wire",
        "cryptography",
        "aiohttp",
        "psycopg",
        "qinglong.shell",
        "qinglong.cli",
    )
    found = worker_venv.dump(*modules, cwd=outside)
    assert found["version"] == sys.version  # the same interpreter, so markers evaluate as they do here
    requires: dict[str, list[str]] = found["requires"]
    installed = {canonicalize_name(name) for name in requires}
    direct = {canonicalize_name(Requirement(r).name) for r in requires["qinglong-worker"]}
    assert direct == {"cryptography", "qinglong-wire"}
    assert requires["qinglong-wire"] == []
    third_party = installed - worker_venv.bootstrap - OURS
    assert "cryptography" in third_party
    assert third_party == {"cryptography"} | closure("cryptography", requires), (
        "a distribution cryptography does not need"
    )
    assert closure("qinglong-worker", requires) == third_party | {"qinglong-wire"}

    origin: dict[str, str | None] = found["origin"]
    for module in ("qinglong.worker.run", "qinglong.wire", "cryptography"):
        where = origin[module]
        assert where is not None and Path(where).is_relative_to(worker_venv.root), f"{module} from {where}"
    assert (
        origin["aiohttp"] is None
        and origin["psycopg"] is None
        and origin["qinglong.shell"] is None
        and origin["qinglong.cli"] is None
    )

    listed = subprocess.run([worker_venv.bin("python"), "-m", "pip", "list"], capture_output=True, text=True)
    print(f"pip list of the Worker venv:\n{listed.stdout}")


def test_a_worker_install_asked_for_a_control_plane_command_names_the_distribution(
    worker_venv: Venv, outside: Path
) -> None:
    out = subprocess.run(
        [worker_venv.bin("qinglong-worker"), "pki", "init"], cwd=outside, capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("qinglong-worker: 'pki' is not a Worker command") and "qinglong-control" in line, line


@pytest.mark.db
async def test_the_installed_worker_completes_a_run_against_the_real_shell(rig: Rig, worker_venv: Venv) -> None:
    # What the Worker process will import, with its environment and working folder: the venv's copy.
    found = worker_venv.dump("qinglong.worker.run", "qinglong.worker.runner", cwd=rig.root)
    assert all(Path(o).is_relative_to(worker_venv.root) for o in found["origin"].values()), found["origin"]
    run = rig.add_run({"argv": ["sh", "-c", "echo installed"]})
    config = rig.write_config(tick_seconds=0.2, shutdown_seconds=3.0)
    with child_subreaper():
        worker = rig.start_worker_process(config, command=[worker_venv.bin("qinglong-worker")])
        await poll(lambda: rig.run_status(run) in ENDED_RUN and rig.state() == "completed", within=30, every=0.05)
        assert rig.run_status(run) == "succeeded", worker.output()
        worker.popen.send_signal(signal.SIGTERM)
        assert await worker.wait(5) == 0, worker.output()
    [attempt] = rig.attempts(run)
    assert (attempt["status"], attempt["exit_code"]) == ("succeeded", 0)
    # The task's output reached the control plane.
    assert rig.output(run) == b"installed\n"
    assert [t for t, _, _ in rig.events(run)][-2:] == ["attempt.succeeded", "run.succeeded"]


@pytest.fixture
def scratch(cluster: Cluster) -> Iterator[str]:
    """An empty database of the session cluster (nothing deployed), dropped after the test."""
    name = f"install_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute(sql.SQL("drop database {} with (force)").format(sql.Identifier(name)))


def api_functions(dsn: str) -> list[str]:
    query = (
        "select p.oid::regprocedure::text from pg_catalog.pg_proc p"
        " join pg_catalog.pg_namespace n on n.oid = p.pronamespace where n.nspname = 'ql_api' order by 1"
    )
    with psycopg.connect(dsn) as conn:
        return [row[0] for row in conn.execute(query).fetchall()]


@pytest.mark.db
def test_a_control_install_deploys_and_verifies_the_schema_from_outside_the_checkout(
    control_venv: Venv, cluster: Cluster, template_db: str, scratch: str, outside: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "QINGLONG_DB_TARGET")}
    target = cluster.sqitch_target(scratch)
    assert api_functions(cluster.dsn(scratch)) == []
    for command in ("deploy", "verify"):
        started = time.monotonic()
        out = subprocess.run(
            [control_venv.bin("qinglong"), "db", command, "--target", target],
            cwd=outside,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        print(f"qinglong db {command}: {time.monotonic() - started:.1f} s")
        assert (out.returncode, out.stdout) == (0, f"sqitch {command}: ok ({target})\n"), out.stderr
    deployed = api_functions(cluster.dsn(scratch))
    assert len(deployed) > 10
    assert deployed == api_functions(cluster.dsn(template_db))  # the checkout's deploy, by the session fixture

    probe = "import qinglong.db as d, json; print(json.dumps([str(d.PROJECT), d.sqitch()]))"
    out = subprocess.run(
        [control_venv.bin("python"), "-c", probe], cwd=outside, env=env, check=True, capture_output=True, text=True
    )
    project, argv = json.loads(out.stdout)
    assert Path(project).is_relative_to(control_venv.root) and not Path(project).is_relative_to(REPO), project
    assert (Path(project) / "sqitch.plan").is_file()
    assert argv[:3] == ["sqitch", "--chdir", project]
