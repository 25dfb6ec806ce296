"""The wheel maps wire/, shell/, worker/, devdb/ and cli/ under the import root `qinglong`, and an
installed wheel imports without the repository on sys.path. Touches: a temporary folder."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("wire", "shell", "worker", "devdb", "cli")


def test_installed_wheel_imports_every_package_under_qinglong(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            tmp_path,
            REPO,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[1] for n in names if n.startswith("qinglong/")} == set(PACKAGES)
    assert not [n for n in names if n.split("/")[0] in PACKAGES], "a bare top-level package leaked"

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", target, wheel],
        check=True,
        capture_output=True,
    )
    probe = (
        "import sys, qinglong.wire, qinglong.shell, qinglong.worker, qinglong.cli, qinglong.devdb as d;"
        " print(d.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = [{str(target)!r}]; {probe}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert out.stdout.strip().startswith(str(target / "qinglong" / "devdb"))
