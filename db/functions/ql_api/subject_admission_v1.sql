-- ql_api.subject_admission_v1: authenticate a bearer digest for a route that names no Project, and audit it.
-- Lock order: none (reads; at most one insert).
create or replace function ql_api.subject_admission_v1(
  p_token_digest bytea,
  p_route text,
  p_request_id text
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- request_admission_v1 without a Project: such a route (the Projects a subject may read) decides per Project
-- inside its own function, so here an active subject is allowed (reason ok) and audited with no Project and
-- no permission. An unknown token or a disabled subject is denied exactly as v1 denies it: no audit row, no
-- write (decision 0006). The answer has v1's shape; projectVersion and bindingVersion are null.
declare
  v_subject ql.subjects;
  v_audit uuid;
begin
  if p_token_digest is null or octet_length(p_token_digest) <> 32 then return ql.outcome('invalid', 'token_digest'); end if;
  if p_route is null or length(p_route) not between 1 and 200 then return ql.outcome('invalid', 'route'); end if;
  if p_request_id is null or p_request_id !~ '^[A-Za-z0-9._:-]{1,128}$' then
    return ql.outcome('invalid', 'request_id');
  end if;

  select * into v_subject from ql.subjects s where s.token_digest = p_token_digest;
  if v_subject.id is not null and v_subject.status = 'active' then
    insert into ql.security_audit (at_ms, subject_id, route, decision, reason, request_id)
    values (ql.now_ms(), v_subject.id, p_route, 'allow', 'ok', p_request_id)
    returning id into v_audit;
  end if;
  return jsonb_build_object(
    'decision', case when v_audit is null then 'deny' else 'allow' end,
    'reason', case when v_subject.id is null then 'auth.unknown_token'
                   when v_audit is null then 'auth.subject_disabled' else 'ok' end,
    'subjectId', v_subject.id, 'subjectKind', v_subject.kind, 'projectVersion', null, 'bindingVersion', null,
    'auditId', coalesce(v_audit, '00000000-0000-0000-0000-000000000000'));
end;
$$;

comment on function ql_api.subject_admission_v1(bytea, text, text) is
'Returns {decision: allow | deny, reason: ok | auth.unknown_token | auth.subject_disabled, subjectId, subjectKind, '
'projectVersion: null, bindingVersion: null, auditId (the nil uuid when nothing was audited)} | invalid (nothing '
'audited). Raises nothing on input.';
grant execute on function ql_api.subject_admission_v1(bytea, text, text) to ql_runtime;
