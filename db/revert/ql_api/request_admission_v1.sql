-- Revert qinglong:ql_api/request_admission_v1 from pg
-- RESTORES the previous instance: the body of deploy/ql_api/request_admission_v1@v0.1.0.sql with its grants,
-- written by scripts/sync_functions.py; never edit this one.
begin;
set local role ql_owner;
revoke all on function ql_api.request_admission_v1(bytea, uuid, text, text, text) from public, ql_runtime, ql_scheduler, ql_readonly;

-- ql_api.request_admission_v1: authenticate a bearer token's digest, decide a permission on a project
-- and write the durable security audit row — one committed transaction, before the request body is read.
-- Decisions: allow | deny | require_approval (an agent asking run.stop always needs a human).
-- A subject without an active binding sees the project as missing (deny, reason project.not_found),
-- so projects cannot be enumerated. The bearer token itself never reaches the database.
-- Lock order: none (reads; one insert).
-- Returns {"decision","reason","subjectId","subjectKind","projectVersion","bindingVersion","auditId"}
--   | {"status":"invalid","reason"} (a shell bug: nothing is audited).
-- signature: ql_api.request_admission_v1(bytea, uuid, text, text, text)
-- grant execute: ql_runtime
create or replace function ql_api.request_admission_v1(
  p_token_digest bytea,
  p_project_id uuid,
  p_permission text,
  p_route text,
  p_request_id text
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_subject ql.subjects;
  v_project ql.projects;
  v_binding ql.role_bindings;
  v_decision text;
  v_reason text;
  v_audit uuid;
begin
  if p_token_digest is null or octet_length(p_token_digest) <> 32 then return ql.outcome('invalid', 'token_digest'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_permission is null or p_permission not in ('run.read', 'run.start', 'run.stop') then
    return ql.outcome('invalid', 'permission');
  end if;
  if p_route is null or length(p_route) not between 1 and 200 then return ql.outcome('invalid', 'route'); end if;
  if p_request_id is null or p_request_id !~ '^[A-Za-z0-9._:-]{1,128}$' then
    return ql.outcome('invalid', 'request_id');
  end if;

  select * into v_subject from ql.subjects s where s.token_digest = p_token_digest;
  select * into v_project from ql.projects p where p.id = p_project_id;
  select * into v_binding from ql.role_bindings b
   where b.project_id = p_project_id and b.subject_id = v_subject.id and b.active;

  select d.decision, d.reason into v_decision, v_reason from (values (
    case
      when v_subject.id is null then 'deny'
      when v_subject.status <> 'active' then 'deny'
      when v_project.id is null or v_binding.project_id is null then 'deny'
      when v_project.status <> 'active' and p_permission <> 'run.read' then 'deny'
      when not ql.role_allows(v_binding.role, p_permission) then 'deny'
      when v_subject.kind = 'agent' and p_permission = 'run.stop' then 'require_approval'
      else 'allow'
    end,
    case
      when v_subject.id is null then 'auth.unknown_token'
      when v_subject.status <> 'active' then 'auth.subject_disabled'
      when v_project.id is null or v_binding.project_id is null then 'project.not_found'
      when v_project.status <> 'active' and p_permission <> 'run.read' then 'project.archived'
      when not ql.role_allows(v_binding.role, p_permission) then 'role.insufficient'
      when v_subject.kind = 'agent' and p_permission = 'run.stop' then 'agent.approval_required'
      else 'ok'
    end)) d(decision, reason);

  insert into ql.security_audit (at_ms, subject_id, route, project_id, permission, decision, reason, request_id)
  values (ql.now_ms(), v_subject.id, p_route, p_project_id, p_permission, v_decision, v_reason, p_request_id)
  returning id into v_audit;

  return jsonb_build_object(
    'decision', v_decision, 'reason', v_reason, 'subjectId', v_subject.id, 'subjectKind', v_subject.kind,
    'projectVersion', case when v_decision = 'allow' then v_project.version end,
    'bindingVersion', case when v_decision = 'allow' then v_binding.version end,
    'auditId', v_audit);
end;
$$;

comment on function ql_api.request_admission_v1(bytea, uuid, text, text, text) is
'Authenticates a bearer-token digest, decides allow | deny | require_approval for (project, permission) and commits '
'one security_audit row. Reasons: ok, auth.unknown_token, auth.subject_disabled, project.not_found, project.archived, '
'role.insufficient, agent.approval_required. invalid (nothing audited) for malformed arguments. Raises nothing on input.';
revoke all on function ql_api.request_admission_v1(bytea, uuid, text, text, text) from public;
grant execute on function ql_api.request_admission_v1(bytea, uuid, text, text, text) to ql_runtime;

commit;
