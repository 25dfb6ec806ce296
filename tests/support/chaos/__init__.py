"""Chaos on real parts: one engine, used short by tests/integration/test_chaos.py (about 36 Runs) and at
full size by `make bench` (bench/chaos.py, part e, ≥ 500 Runs). Real PostgreSQL (the schema deployed by
sqitch), the real shell as its own process, 2 or 3 real `qinglong-worker run` processes, each its own enrolled
Worker with its own journal and work folder, and between each Worker and the shell's worker port a
TCP fault proxy (asyncio, loopback) that, on a request chosen at random, loses the answer after the
shell committed, cuts the connection in the middle of the answer, stalls the answer, or resets the
connection before the request reaches the shell. Meanwhile Workers are SIGKILLed and restarted
(sometimes only after longer than the Lease TTL + the reconciliation grace), SIGSTOPped and
SIGCONTed, and one Worker's journal is deleted under it (it must fail closed; it is then killed and
restarted with a fresh journal). Convergence and lease-expiry recovery run every 0.5 s
(`CALL ql_api.converge(…)` as ql_scheduler), not pg_cron's minute.

Every Run is its own Task whose argv (`sh -c SCRIPT chaos-task FOLDER SECONDS CODE`) records its
own execution: it takes an exclusive non-blocking flock on FOLDER/lock for its whole life (a second
concurrent execution of one Run cannot take it and writes `overlap`), appends `start`, then `end`
(its exit code) or `term` (SIGTERM) lines with wall-clock times, its pid and its parent's pid (the
runner wrapper). The counts come from those records, the runner wrappers' own files in each
Worker's work folder (identity, dead-man's switch expiry, status), the fault log kept here and the
database's rows; nothing is assumed. Definitions: bench/README.md, part (e).

Touches: its root folder (PKI files, configs, journals, work folders, task records, logs), the
database it is given (settings, fixture rows via the operator functions, Runs through the user API),
loopback ports, the processes it starts (the shell, Workers, and, as their child subreaper, the
orphaned task runners of killed Workers), and this process's child-subreaper flag while it runs.

Modules: `config` (settings, the task script, the planned Runs), `processes` (the child subreaper and
orphans), `proxy` (the TCP fault proxy), `workers` (one Worker process and its faults), `engine` (set-up,
the run, the Worker faults), `evidence` (the tasks' records, the runners' files, the database's rows),
`analysis` (the counts), `failover` (the engine failing a Patroni cluster over instead).
"""
