-- Deploy qinglong:ql/tenancy to pg
-- FROZEN COPY of db/schema/ql/tenancy.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Projects, the subjects that act on them (users, agents, the system), and their role bindings.
begin;
set local role ql_owner;

create table ql.projects (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  name text not null unique check (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
  status text not null default 'active' check (status in ('active', 'archived')),
  version bigint not null default 1 check (version >= 1),
  created_at_ms ql.ms not null default ql.now_ms()
);
comment on table ql.projects is 'A tenant. version bumps on every policy change (status, bindings), so admissions can be re-verified.';
comment on column ql.projects.status is 'active: accepts work | archived: read-only, every mutation is fenced';

create table ql.subjects (
  id uuid primary key default pg_catalog.gen_random_uuid(),
  kind text not null check (kind in ('user', 'agent', 'system')),
  name text not null check (pg_catalog.length(name) between 1 and 200),
  token_digest ql.sha256 unique,
  status text not null default 'active' check (status in ('active', 'disabled')),
  created_at_ms ql.ms not null default ql.now_ms()
);
comment on table ql.subjects is 'Who calls the user API. Only the SHA-256 of a bearer token is stored, never the token.';
comment on column ql.subjects.kind is 'user: a person | agent: an automated caller (run.stop needs approval) | system: the control plane';

create table ql.role_bindings (
  project_id uuid not null references ql.projects (id),
  subject_id uuid not null references ql.subjects (id),
  role text not null check (role in ('owner', 'admin', 'operator', 'viewer')),
  version bigint not null default 1 check (version >= 1),
  active boolean not null default true,
  primary key (project_id, subject_id)
);
create index role_bindings_subject_idx on ql.role_bindings (subject_id);
comment on table ql.role_bindings is 'A subject''s role in a project. version bumps on every change; revocation sets active=false.';

commit;
