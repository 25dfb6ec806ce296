-- Deploy qinglong:ql/tasks to pg
-- FROZEN COPY of db/schema/ql/tasks.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Tasks and their immutable execution revisions. A Run pins one revision for its whole life.
begin;
set local role ql_owner;

create table ql.executor_revisions (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  kind text not null check (kind in ('process')),
  version integer not null check (version >= 1),
  unique (kind, version)
);
comment on table ql.executor_revisions is 'An executor implementation a plan runs on. Immutable.';

create table ql.tasks (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  project_id uuid not null references ql.projects (id),
  name text not null check (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
  current_revision_id uuid,
  created_at_ms ql.ms not null default ql.now_ms(),
  unique (project_id, name),
  unique (id, project_id)
);
comment on table ql.tasks is 'A script of a project. current_revision_id is what a new Run pins.';

create table ql.task_execution_revisions (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  task_id uuid not null,
  project_id uuid not null,
  plan_json jsonb not null check (ql.plan_is_valid(plan_json)),
  executor_revision_id uuid not null references ql.executor_revisions (id),
  created_at_ms ql.ms not null default ql.now_ms(),
  foreign key (task_id, project_id) references ql.tasks (id, project_id),
  unique (id, task_id, project_id)
);
comment on table ql.task_execution_revisions is
'An immutable execution plan of a task (trigger refuses UPDATE/DELETE). plan_json: argv, env, timeoutMs (absent = no timeout), maxAttempts, retryBackoffMs, pool.';

alter table ql.tasks add foreign key (current_revision_id, id, project_id)
  references ql.task_execution_revisions (id, task_id, project_id) deferrable initially deferred;

create trigger task_execution_revisions_immutable
  before update or delete on ql.task_execution_revisions
  for each row execute function ql.reject_mutation();
create trigger task_execution_revisions_no_truncate
  before truncate on ql.task_execution_revisions
  for each statement execute function ql.reject_mutation();
create trigger executor_revisions_immutable
  before update or delete on ql.executor_revisions
  for each row execute function ql.reject_mutation();

insert into ql.executor_revisions (id, kind, version)
values ('00000000-0000-4000-8000-000000000001', 'process', 1);

commit;
