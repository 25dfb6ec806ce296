-- Deploy qinglong:ql_api/request_admission_v1 to pg
-- FROZEN COPY of db/functions/ql_api/request_admission_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.request_admission_v1: authenticate a bearer digest, decide a permission on a project and audit it, before the body is read.
-- Lock order: none (reads; at most one insert).
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
-- Decisions: allow | deny | require_approval (an agent asking run.stop always needs a human).
-- A subject without an active binding sees the project as missing (deny, reason project.not_found),
-- so projects cannot be enumerated. The bearer token itself never reaches the database.
-- Unauthenticated (an unknown token, auth.unknown_token; a disabled subject, auth.subject_disabled): deny
-- with no audit row and no write at all, so a flood of them costs one index read each (decision 0006;
-- the shell's metric and log line record them). Every decision about an active subject is audited.
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
  if p_permission is null or p_permission not in ('run.read', 'run.start', 'run.stop', 'secret.read', 'secret.write',
                                                      'task.write') then
    return ql.outcome('invalid', 'permission');
  end if;
  if p_route is null or length(p_route) not between 1 and 200 then return ql.outcome('invalid', 'route'); end if;
  if p_request_id is null or p_request_id !~ '^[A-Za-z0-9._:-]{1,128}$' then
    return ql.outcome('invalid', 'request_id');
  end if;

  select * into v_subject from ql.subjects s where s.token_digest = p_token_digest;
  if v_subject.id is null or v_subject.status <> 'active' then
    return jsonb_build_object(
      'decision', 'deny',
      'reason', case when v_subject.id is null then 'auth.unknown_token' else 'auth.subject_disabled' end,
      'subjectId', v_subject.id, 'subjectKind', v_subject.kind, 'projectVersion', null, 'bindingVersion', null,
      'auditId', '00000000-0000-0000-0000-000000000000');
  end if;
  select * into v_project from ql.projects p where p.id = p_project_id;
  select * into v_binding from ql.role_bindings b
   where b.project_id = p_project_id and b.subject_id = v_subject.id and b.active;

  v_reason := case when v_project.id is null or v_binding.project_id is null then 'project.not_found'
                   else ql.admission_reason(v_project.status, v_binding.role, v_subject.kind, p_permission) end;
  v_decision := case v_reason when 'ok' then 'allow' when 'agent.approval_required' then 'require_approval'
                              else 'deny' end;

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
'Returns {decision: allow | deny | require_approval, reason: ok | project.not_found | project.archived | '
'role.insufficient | agent.approval_required | auth.unknown_token | auth.subject_disabled, subjectId, '
'subjectKind, projectVersion, bindingVersion, auditId (the nil uuid when nothing was audited)} | invalid '
'(nothing audited). Raises nothing on input.';
grant execute on function ql_api.request_admission_v1(bytea, uuid, text, text, text) to ql_runtime;

commit;
