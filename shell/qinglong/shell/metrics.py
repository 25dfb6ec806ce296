"""The shell's Prometheus metrics, in a registry of its own (served on the loopback admin port).
Touches process memory only, except in a shell of several processes (qinglong.shell.processes,
PROMETHEUS_MULTIPROC_DIR set before prometheus_client is imported), where each process writes its values to
files in that folder, and the parent serves their sum: counters and histograms add up, gauges as their
multiprocess_mode says. Labels are route names, statuses, stable codes, listener names
(worker, user, admin) and budget names (and `pid`, the process, on CONNECTIONS_ACCEPTED with several processes):
never ids, tokens, keys, digests or addresses.

On the request path a labelled child is looked up once (`child`) and kept: prometheus_client's `labels()`
takes a lock and builds a key on every call. Every label set is bounded (route names and statuses, codes,
function names), and a child is never removed from its metric, so a kept child is the metric's own.
"""

from __future__ import annotations

from typing import Final, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound=MetricWrapperBase)
_CHILDREN: dict[tuple[int, tuple[str, ...]], MetricWrapperBase] = {}


def child(metric: M, *labels: str) -> M:
    """`metric.labels(*labels)`, looked up once per label set."""
    key = (id(metric), labels)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = metric.labels(*labels)
    return found  # type: ignore[return-value]


REGISTRY: Final = CollectorRegistry(auto_describe=True)

REQUESTS: Final = Counter(
    "qinglong_shell_requests",
    "Requests answered, by route and HTTP status",
    ["route", "status"],
    registry=REGISTRY,
)
REFUSALS: Final = Counter(
    "qinglong_shell_refusals",
    "Requests refused, by stable error code (fences included)",
    ["code"],
    registry=REGISTRY,
)
DB_LATENCY: Final = Histogram(
    "qinglong_shell_db_seconds",
    "Latency of one ql_api call, by function",
    ["function"],
    registry=REGISTRY,
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0),
)
DB_GROUP: Final = Histogram(
    "qinglong_shell_db_group_calls",
    "Calls of a grouped route run as one statement (the calls of one function queued until a connection was free)",
    ["function"],
    registry=REGISTRY,
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
CONNECTIONS_OPEN: Final = Gauge(
    "qinglong_shell_connections_open",
    "Connections open now, TLS handshakes included, by listener",
    ["listener"],
    registry=REGISTRY,
    multiprocess_mode="livesum",  # several processes: the sum over the live ones
)
CONNECTIONS_ACCEPTED: Final = Gauge(
    "qinglong_shell_connections_accepted",
    "Connections this process accepted (and did not refuse at accept) since it started, by listener;"
    " several processes: one series per live process, label pid",
    ["listener"],
    registry=REGISTRY,
    multiprocess_mode="liveall",
)
BUDGET_HITS: Final = Counter(
    "qinglong_shell_budget_hits",
    "Connections refused at accept, made to wait for a handshake or closed by a budget, by listener and budget",
    ["listener", "budget"],
    registry=REGISTRY,
)
UNAUTHENTICATED: Final = Counter(
    "qinglong_shell_unauthenticated",
    "User-API requests refused auth.unauthenticated, by reason: missing or malformed (no well-formed bearer token:"
    " refused before any database call), unknown_token or subject_disabled (refused by admission, which writes"
    " nothing for them; decision 0006)",
    ["reason"],
    registry=REGISTRY,
)
VERIFIED: Final = Counter(
    "qinglong_shell_ql3w_verified",
    "Worker requests whose ql3w signature verified, by the secret that verified it: current, or accepted (a"
    ' session keyed before a rotation, told to re-key; docs/operations.md, "Secret rotation")',
    ["key"],
    registry=REGISTRY,
)
SECRET_VERSIONS_NOT_CURRENT: Final = Gauge(
    "qinglong_shell_secret_versions_not_current",
    "Sealed secret versions the last rewrap pass left under another key-encryption key than the current one (their"
    " key is not held here, or they do not authenticate); 0 once a rotation is complete"
    ' (docs/operations.md, "Project secrets")',
    registry=REGISTRY,
    multiprocess_mode="livemax",  # several processes: each pass sees the same database
)
SECRET_REWRAPS: Final = Counter(
    "qinglong_shell_secret_rewraps",
    "Sealed secret versions a rewrap pass handled, by outcome: rewrapped (moved to the current key-encryption key),"
    " unchanged (another shell moved it first, or it was deleted meanwhile), skipped (its key is not held here, or it"
    " does not authenticate)",
    ["outcome"],
    registry=REGISTRY,
)
