"""qinglong/project-view@v1: a subject's view of one Project, and its Workers. Touches nothing: declarations.

For the user API and its clients (the web console first).

The view: no body, no query. The answer is ql_api.project_view_v1's `found` result: the Project (id,
name, status), the subject (name, kind), its role, and for run.read, run.start and run.stop the decision
admission takes now (`allow`, `deny`, or `approval_required`: an agent asking run.stop). A client offers
only what is not `deny`; the API still decides every request itself.

Its Workers: no body, no query. The answer is ql_api.project_workers_v1's `listed` result: the Workers
of the pools this Project's tasks use, by name, each with its pool, generation, status, whether it is
online (a live, unexpired session), its last contact and the number of this Project's Attempts it holds.
Never a Worker's id, certificate or another Project's work.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import NAME_PATTERN, TIME_MS
from qinglong.wire.fields import Bool, Enum, Int, List, Message, Nested, Record, Str, Uuid, wire
from qinglong.wire.offer import POOL_PATTERN

PROJECT_VIEW_SCHEMA: Final = "qinglong/project-view@v1"
WORKERS_MAX: Final = 1000
Decision = Literal["allow", "deny", "approval_required"]
DECISIONS: Final[tuple[Decision, ...]] = ("allow", "deny", "approval_required")


class ProjectView(Message):
    """The admitted subject's view of the Project: who it is there, and what it may do."""

    SCHEMA = PROJECT_VIEW_SCHEMA
    CAP = 2 * KIB

    status: Literal["found"] = wire(Enum(("found",)), default="found")
    project_id: str = wire(Uuid())
    project: str = wire(Str(128, min_len=1, pattern=NAME_PATTERN))
    project_status: Literal["active", "archived"] = wire(Enum(("active", "archived")))
    subject: str = wire(Str(200, min_len=1))
    subject_kind: Literal["user", "agent", "system"] = wire(Enum(("user", "agent", "system")))
    role: Literal["owner", "admin", "operator", "viewer"] = wire(Enum(("owner", "admin", "operator", "viewer")))
    run_read: Decision = wire(Enum(DECISIONS))
    run_start: Decision = wire(Enum(DECISIONS))
    run_stop: Decision = wire(Enum(DECISIONS))


class ProjectWorker(Record):
    """One Worker of a pool the Project uses, as much as the Project needs to know."""

    name: str = wire(Str(200, min_len=1))
    pool: str = wire(Str(64, min_len=1, pattern=POOL_PATTERN))
    generation: int = wire(Int(1))
    status: Literal["active", "disabled"] = wire(Enum(("active", "disabled")))
    online: bool = wire(Bool())
    last_contact_at_ms: int | None = wire(TIME_MS, nullable=True)  # null: it never connected
    active_attempts: int = wire(Int(0))  # this Project's Attempts it holds (claimed, starting, running)


class ProjectWorkers(Message):
    """The Workers that serve the Project's pools, by name."""

    SCHEMA = PROJECT_VIEW_SCHEMA
    CAP = 256 * KIB

    status: Literal["listed"] = wire(Enum(("listed",)), default="listed")
    workers: tuple[ProjectWorker, ...] = wire(List(Nested(ProjectWorker), max_items=WORKERS_MAX))


MESSAGES: Final[tuple[type[Message], ...]] = (ProjectView, ProjectWorkers)
