"""Make the repository's top-level packages importable as `qinglong.*` inside .venv.

The wheel maps wire/, shell/, worker/, devdb/ and cli/ under `qinglong` (pyproject.toml). For
development the same mapping is a folder of symbolic links, .venv/import-root/qinglong/<pkg>,
put on sys.path by a .pth file, so edits are live and mypy sees real files (an import hook,
as editable installs use, is invisible to mypy).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

PACKAGES = ("wire", "shell", "worker", "devdb", "cli")


def main() -> None:
    repo = Path(__file__).resolve().parent.parent
    root = repo / ".venv" / "import-root"
    pkg = root / "qinglong"
    pkg.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:
        link = pkg / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(repo / name, target_is_directory=True)
    site = Path(sysconfig.get_paths()["purelib"])
    (site / "qinglong-import-root.pth").write_text(f"{root}\n")
    print(f"linked {', '.join(PACKAGES)} under {pkg}", file=sys.stderr)


if __name__ == "__main__":
    main()
