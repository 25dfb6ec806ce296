"""The `qinglong` command groups, each a module whose `register(top)` adds its parser and handlers to the top-level
parser's commands. GROUPS is their order in --help. Touches nothing on import.
"""

from __future__ import annotations

from collections.abc import Callable

from qinglong.cli.commands import (
    converge,
    db,
    notify,
    pki,
    pool,
    project,
    role,
    run,
    secret,
    shell,
    subject,
    task,
    worker,
)
from qinglong.cli.common import Commands

GROUPS: tuple[Callable[[Commands], None], ...] = (
    db.register,
    pki.register,
    worker.register,
    pool.register,
    project.register,
    subject.register,
    task.register,
    run.register,
    secret.register,
    notify.register,
    converge.register,
    shell.register,
    role.register,
)
