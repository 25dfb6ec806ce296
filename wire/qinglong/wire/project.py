"""qinglong/project-view@v1: a subject's view of one Project, and its Workers. Touches nothing: declarations.

For the user API and its clients (the web console first).

The view: no body, no query. The answer is ql_api.project_view_v1's `found` result: the Project (id,
name, status), the subject (name, kind), its role, and for run.read, run.start, run.stop and task.write the
decision admission takes now (`allow`, `deny`, or `approval_required`: an agent asking run.stop). A client offers
only what is not `deny`; the API still decides every request itself.

Its Workers: no body, no query. The answer is ql_api.project_workers_v1's `listed` result: the Workers
of the pools this Project's tasks use, by name, each with its pool, generation, status, whether it is
online (a live, unexpired session), its last contact and the number of this Project's Attempts it holds.
Never a Worker's id, certificate or another Project's work.

qinglong/project-list@v1, the one user route that names no Project: the Projects the bearer's subject may
read (ql_api.subject_projects_v1's `listed` result: each with its status and the subject's role there), and,
with the query parameter `runIdPrefix` (8 to 32 lower-case hex digits of a Run's id, hyphens left out), the
Runs of those Projects whose id starts with it: at most RUN_MATCHES_MAX, by id, and whether there are more.
So a client finds a Run's Project from the Run's id alone, and takes the short ids it shows.
"""

from __future__ import annotations

from typing import Final, Literal

from qinglong.wire.codec import KIB
from qinglong.wire.common import NAME_PATTERN, RUN_STATUSES, TIME_MS, RunStatus
from qinglong.wire.fields import Bool, Enum, Int, List, Message, Nested, Record, Str, Uuid, wire
from qinglong.wire.offer import POOL_PATTERN
from qinglong.wire.query import Query

PROJECT_VIEW_SCHEMA: Final = "qinglong/project-view@v1"
PROJECT_LIST_SCHEMA: Final = "qinglong/project-list@v1"
WORKERS_MAX: Final = 1000
PROJECTS_MAX: Final = 1000
RUN_MATCHES_MAX: Final = 10
RUN_ID_PREFIX_PATTERN: Final = "[0-9a-f]{8,32}"
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
    task_write: Decision = wire(Enum(DECISIONS), optional=True, default="deny")  # absent from an older database


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


class ProjectListQuery(Query):
    """Also find the Runs whose id starts with this prefix."""

    run_id_prefix: str | None = wire(Str(32, min_len=8, pattern=RUN_ID_PREFIX_PATTERN), optional=True, default=None)


class VisibleProject(Record):
    """A Project the subject may read, and its role there."""

    project_id: str = wire(Uuid())
    project: str = wire(Str(128, min_len=1, pattern=NAME_PATTERN))
    project_status: Literal["active", "archived"] = wire(Enum(("active", "archived")))
    role: Literal["owner", "admin", "operator", "viewer"] = wire(Enum(("owner", "admin", "operator", "viewer")))


class RunMatch(Record):
    """A Run whose id starts with the prefix asked for, and its Project."""

    run_id: str = wire(Uuid())
    project_id: str = wire(Uuid())
    project: str = wire(Str(128, min_len=1, pattern=NAME_PATTERN))
    task_name: str = wire(Str(128, min_len=1, pattern=NAME_PATTERN))
    status: RunStatus = wire(Enum(RUN_STATUSES))


class ProjectList(Message):
    """The Projects the subject may read, by name, and the Runs among them the prefix matched."""

    SCHEMA = PROJECT_LIST_SCHEMA
    CAP = 256 * KIB

    status: Literal["listed"] = wire(Enum(("listed",)), default="listed")
    projects: tuple[VisibleProject, ...] = wire(List(Nested(VisibleProject), max_items=PROJECTS_MAX))
    runs: tuple[RunMatch, ...] = wire(List(Nested(RunMatch), max_items=RUN_MATCHES_MAX))
    more_runs: bool = wire(Bool())


MESSAGES: Final[tuple[type[Message], ...]] = (ProjectView, ProjectWorkers, ProjectList)
