"""Embedded PostgreSQL clusters for tests, the demo and benchmarks; re-exports only.

See `qinglong.devdb.cluster` for what a cluster touches, and `python -m qinglong.devdb run`
for running a command against a throw-away one.
"""

from __future__ import annotations

from qinglong.devdb.cluster import Cluster, ClusterError, server_bindir

__all__ = ["Cluster", "ClusterError", "server_bindir"]
