"""The operator CLI's client of the user API (HTTPS + bearer token): enqueue, cancel, show, list Runs, read
their output, list the Projects the token may read and find Runs by a short id, list a project's tasks, make a task's
revision, enable or disable it, set its schedule and preview a schedule's fire times, set, delete and list its
secrets.
It goes through the shell exactly as any user does, so admission, audit and the policy fence apply.
Touches the network (one request per call) and reads the CA and token files it is given.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qinglong.wire import CANCELLATION_SCHEMA, ENQUEUE_SCHEMA, TASK_SCHEMA, paths
from qinglong.wire.notify import NOTIFY_SCHEMA
from qinglong.wire.secrets import SECRET_SCHEMA


class ApiError(Exception):
    """A refused call: the HTTP status, the stable error code of qinglong/error@v1 and its message (the rule, field or
    admission reason it names)."""

    def __init__(self, status: int, code: str, message: str = "") -> None:
        super().__init__(f"{status} {code}")
        self.status, self.code, self.message = status, code, message


class Unreachable(Exception):
    """The shell could not be reached: the URL and why."""


class BadCa(Exception):
    """The CA file is missing, is not a certificate, or did not verify the shell's certificate (bad input, not an
    outage: the message of a verification failure starts with "TLS: certificate verify failed")."""


def _untrusted(exc: ssl.SSLCertVerificationError, ca: Path) -> BadCa:
    return BadCa(f"TLS: certificate verify failed: {exc.verify_message or exc.reason} (CA file {ca})")


@dataclass(frozen=True)
class UserApi:
    base: str  # https://host:port
    token: str
    ca: Path

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        return ctx

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310 - https only
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            context = self._context()
        except (OSError, ssl.SSLError) as exc:
            raise BadCa(f"cannot use the CA file {self.ca}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            with urllib.request.urlopen(req, context=context, timeout=10) as resp:  # noqa: S310
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())
            except ValueError:
                error = {}
            error = error if isinstance(error, dict) else {}
            raise ApiError(exc.code, str(error.get("code", "unknown")), str(error.get("message", ""))) from None
        except ssl.SSLCertVerificationError as exc:
            raise _untrusted(exc, self.ca) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLCertVerificationError):
                raise _untrusted(exc.reason, self.ca) from None
            hint = " (is it the user API's HTTPS address?)" if isinstance(exc.reason, ssl.SSLError) else ""
            raise Unreachable(f"{self.base}: {exc.reason}{hint}") from None
        except (OSError, http.client.HTTPException) as exc:  # e.g. a peer that closed the connection unanswered
            raise Unreachable(f"{self.base}: {getattr(exc, 'reason', None) or exc or type(exc).__name__}") from None

    def enqueue(self, project: str, task_id: str, mutation_id: str | None = None) -> dict[str, Any]:
        body = {"schema": ENQUEUE_SCHEMA, "mutationId": mutation_id or uuid.uuid4().hex, "taskId": task_id}
        return self.request("POST", paths.RUNS.format(project=project), body)[1]

    def cancel(self, project: str, run_id: str, mutation_id: str | None = None) -> dict[str, Any]:
        body = {"schema": CANCELLATION_SCHEMA, "mutationId": mutation_id or uuid.uuid4().hex}
        return self.request("POST", paths.RUN_CANCELLATION.format(project=project, runId=run_id), body)[1]

    def show(self, project: str, run_id: str) -> dict[str, Any]:
        return self.request("GET", paths.RUN.format(project=project, runId=run_id))[1]

    def list_runs(self, project: str, query: str) -> dict[str, Any]:
        """One page of the run history; `query` is a RunListQuery's query string (qinglong.wire)."""
        return self.request("GET", paths.RUNS.format(project=project) + (f"?{query}" if query else ""))[1]

    def projects(self, run_prefix: str | None = None) -> dict[str, Any]:
        """The Projects this token's subject may read (qinglong/project-list@v1), and its Runs there whose id starts
        with `run_prefix` (hex digits)."""
        from qinglong.wire import ProjectListQuery

        query = ProjectListQuery(run_id_prefix=run_prefix).to_query()
        return self.request("GET", paths.PROJECTS + (f"?{query}" if query else ""))[1]

    def tasks(self, project: str) -> dict[str, Any]:
        """The project's tasks (qinglong/task-list@v1): how a task's name becomes its id."""
        return self.request("GET", paths.TASKS.format(project=project))[1]

    def project_view(self, project: str) -> dict[str, Any]:
        """The token's view of the project (qinglong/project-view@v1): its id, the role, what it may do."""
        return self.request("GET", paths.PROJECT.format(project=project))[1]

    def revise_task(
        self, project: str, task: str, plan: dict[str, Any], signature: dict[str, Any] | None = None,
        mutation_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A new revision of the task (a new task first): the whole plan, and its signature if it was signed."""
        body = {"schema": TASK_SCHEMA, "mutationId": mutation_id or uuid.uuid4().hex, "plan": plan}
        if signature is not None:
            body["planSignature"] = signature
        return self.request("PUT", paths.TASK.format(project=project, task=task), body)[1]

    def set_task_status(self, project: str, task: str, active: bool) -> dict[str, Any]:
        body = {"schema": TASK_SCHEMA, "active": active}
        return self.request("PUT", paths.TASK_STATUS.format(project=project, task=task), body)[1]

    def set_task_schedule(
        self, project: str, task: str, cron: str | None, timezone: str, overlap: str
    ) -> dict[str, Any]:
        """Set (or, with cron None, clear) the task's schedule."""
        body: dict[str, Any] = {"schema": TASK_SCHEMA, "cron": cron}
        if cron is not None:
            body |= {"timezone": timezone, "overlap": overlap}
        return self.request("PUT", paths.TASK_SCHEDULE.format(project=project, task=task), body)[1]

    def preview_schedule(self, project: str, query: str) -> dict[str, Any]:
        """The next fire times of an expression; `query` is a SchedulePreviewQuery's query string (qinglong.wire)."""
        return self.request("GET", paths.SCHEDULE_PREVIEW.format(project=project) + f"?{query}")[1]

    def output(self, project: str, run_id: str, query: str) -> dict[str, Any]:
        """One page of an Attempt's output; `query` is a RunOutputQuery's query string (qinglong.wire)."""
        path = paths.RUN_OUTPUT.format(project=project, runId=run_id)
        return self.request("GET", path + (f"?{query}" if query else ""))[1]

    def set_secret(self, project: str, name: str, value: bytes, mutation_id: str | None = None) -> dict[str, Any]:
        """A new version of a project secret (the value travels once, in this body, over TLS)."""
        body = {
            "schema": SECRET_SCHEMA,
            "mutationId": mutation_id or uuid.uuid4().hex,
            "value": base64.b64encode(value).decode("ascii"),
        }
        return self.request("PUT", paths.SECRET.format(project=project, name=name), body)[1]

    def delete_secret(self, project: str, name: str, mutation_id: str | None = None) -> dict[str, Any]:
        body = {"schema": SECRET_SCHEMA, "mutationId": mutation_id or uuid.uuid4().hex}
        return self.request("POST", paths.SECRET_DELETION.format(project=project, name=name), body)[1]

    def secrets(self, project: str) -> dict[str, Any]:
        """The project's secrets: names, versions, sizes, who and when (never a value)."""
        return self.request("GET", paths.SECRETS.format(project=project))[1]

    def set_notify_rule(self, project: str, rule: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Create or replace a notification rule (its events, channel, URL, secret name, template)."""
        body = {"schema": NOTIFY_SCHEMA, **{k: v for k, v in fields.items() if v is not None}}
        return self.request("PUT", paths.NOTIFY_RULE.format(project=project, rule=rule), body)[1]

    def remove_notify_rule(self, project: str, rule: str) -> dict[str, Any]:
        body = {"schema": NOTIFY_SCHEMA}
        return self.request("POST", paths.NOTIFY_RULE_REMOVAL.format(project=project, rule=rule), body)[1]

    def notify_rules(self, project: str) -> dict[str, Any]:
        return self.request("GET", paths.NOTIFY_RULES.format(project=project))[1]

    def notify_deliveries(self, project: str, query: str) -> dict[str, Any]:
        """The latest notifications and their attempts (`query`: rule=…&limit=…, already encoded)."""
        path = paths.NOTIFY_DELIVERIES.format(project=project)
        return self.request("GET", f"{path}?{query}" if query else path)[1]
