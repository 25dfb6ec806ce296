"""`qinglong shell serve --config FILE`: one shell process (qinglong.shell.server) or, with `processes` > 1
in shell.toml, a parent of that many (qinglong.shell.processes). Touches the environment
(PROMETHEUS_MULTIPROC_DIR, a temporary folder for the metric files) and what those two modules touch.

qinglong.shell.processes is imported inside main(): with `processes` > 1, PROMETHEUS_MULTIPROC_DIR must be
set before prometheus_client is first imported (it picks where metric values live at import).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Final

from qinglong.shell.config import load
from qinglong.shell.server import serve
from qinglong.wire.logline import configure as configure_logging

MULTIPROC_DIR: Final = "PROMETHEUS_MULTIPROC_DIR"


def main(config_path: Path) -> int:
    """Serve as shell.toml says; the exit code (0 after SIGTERM/SIGINT). ConfigError or OSError (a listener
    cannot bind) when the shell cannot start."""
    configure_logging()
    config = load(config_path)
    if config.processes == 1:
        asyncio.run(serve(config, config_path=config_path))
        return 0
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before PROMETHEUS_MULTIPROC_DIR was set")
    folder = os.environ[MULTIPROC_DIR] = tempfile.mkdtemp(prefix="qinglong-shell-metrics-")  # the children inherit it
    from qinglong.shell.processes import supervise

    return asyncio.run(supervise(config, config_path, folder))
