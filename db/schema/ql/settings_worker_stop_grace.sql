-- The Workers' stop grace, known to the database, so that convergence never declares lost a Run whose task may
-- still be stopping. A Worker (and, at an unrenewed Lease expiry, its task's runner wrapper, which re-reads its
-- lease file once a second) stops a task with TERM, stop_grace_seconds, KILL (worker.toml, 0..3600 s, default 5).
-- So a task may still run until its Lease expiry + 1 s + the stop grace, and ql_api.converge refuses a grace
-- below worker_stop_grace_ms + 1000 (ql_api.converge_grace_floor_v1). Set it to the longest stop_grace_seconds
-- of the fleet (docs/operations.md, "Convergence").
begin;
set local role ql_owner;

alter table ql.settings add column worker_stop_grace_ms bigint not null default 5000
  check (worker_stop_grace_ms between 0 and 3600000);
comment on column ql.settings.worker_stop_grace_ms is
'The longest stop_grace_seconds (TERM to KILL) of any Worker, in ms: ql_api.converge refuses a grace below it + 1000.';

commit;
