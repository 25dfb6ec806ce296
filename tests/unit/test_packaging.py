"""Each top-level folder builds its own wheel holding only `qinglong/<folder>/`; the db wheel carries the
whole sqitch project; the Worker's wheel needs nothing but cryptography and the wire contracts; installed
side by side, the wheels import without the repository on sys.path. (tests/e2e/test_install.py installs
them with real pip into fresh virtualenvs.) Touches: a temporary folder."""

from __future__ import annotations

import email
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from qinglong.db import SCRIPTS

REPO = Path(__file__).resolve().parents[2]
FOLDERS = sorted(p.parent.name for p in REPO.glob("*/pyproject.toml"))


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run(["bash", REPO / "scripts" / "dist.sh", out], check=True, capture_output=True)  # as `make dist`
    built = {w.name.split("-")[0].removeprefix("qinglong_"): w for w in out.glob("*.whl")}
    return {folder: built["control" if folder == "cli" else folder] for folder in FOLDERS}


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(meta)).get_all("Requires-Dist") or []


def test_every_folder_is_a_distribution_holding_only_its_package(wheels: dict[str, Path]) -> None:
    assert set(FOLDERS) == {"cli", "db", "devdb", "shell", "wire", "worker"}
    for folder, wheel in wheels.items():
        names = [n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n]
        assert names, folder
        assert {n.split("/")[:2] == ["qinglong", folder] for n in names} == {True}, f"{folder}: {names[:5]}"
        assert f"qinglong/{folder}/py.typed" in names
        assert "qinglong/__init__.py" not in names  # `qinglong` stays a namespace shared by all


def test_the_db_wheel_carries_the_sqitch_project(wheels: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(wheels["db"]).namelist())
    scripts = {
        p.relative_to(SCRIPTS).as_posix() for f in ("deploy", "revert", "verify") for p in (SCRIPTS / f).rglob("*")
    }
    packaged = {n.removeprefix("qinglong/db/project/db/") for n in names if n.startswith("qinglong/db/project/db/")}
    assert len(scripts) > 300
    assert packaged == {s for s in scripts if s.endswith(".sql")}  # the scripts, not their sources or pgTAP
    assert {"qinglong/db/project/sqitch.plan", "qinglong/db/project/sqitch.conf"} <= names


def test_siblings_are_required_by_name_and_their_exact_version_never_by_path(wheels: dict[str, Path]) -> None:
    versions = {}
    for wheel in wheels.values():
        with zipfile.ZipFile(wheel) as z:
            (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
            message = email.message_from_bytes(z.read(meta))
            versions[message["Name"]] = message["Version"]
            assert b"file:" not in z.read(meta), f"{wheel.name} names the machine it was built on"
    for folder, wheel in wheels.items():
        for text in _requires(wheel):
            name, _, pin = text.partition("==")
            assert "@" not in text, f"{folder}: a direct reference {text!r}"
            if name.startswith("qinglong-"):
                assert pin == versions[name], f"{folder} pins {text!r}, but {name} is {versions[name]}"


def test_the_worker_needs_only_cryptography_and_the_wire_contracts(wheels: dict[str, Path]) -> None:
    """`cryptography`: plan signatures (qinglong.wire.signing) are Ed25519. No HTTP library: the Worker has its own
    client (qinglong.worker.https). Wire itself requires nothing."""
    required = sorted(r.split(" ")[0].split("=")[0] for r in _requires(wheels["worker"]))
    assert required == ["cryptography", "qinglong-wire"]
    assert _requires(wheels["wire"]) == []


def test_installed_wheels_import_without_the_repository(wheels: dict[str, Path], tmp_path: Path) -> None:
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target)]
    subprocess.run([*install, *map(str, wheels.values())], check=True, capture_output=True)
    probe = "; ".join(
        [
            f"import sys; sys.path[:0] = [{str(target)!r}]",
            *(f"import qinglong.{f}" for f in FOLDERS),
            "print(*(m.__file__ for n, m in sorted(sys.modules.items()) if n.count('.') == 1 "
            "and n.startswith('qinglong.')), sep='\\n')",
            "import qinglong.db as d; print(d.PROJECT)",
        ]
    )
    out = subprocess.run([sys.executable, "-I", "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path)
    paths = out.stdout.split()
    assert len(paths) == len(FOLDERS) + 1
    assert all(p.startswith(str(target)) for p in paths), paths
    assert (Path(paths[-1]) / "sqitch.plan").is_file()
