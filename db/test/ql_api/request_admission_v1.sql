-- Tests ql_api.request_admission_v1: authentication by token digest, the policy decision for every role and
-- permission, every deny reason, agent approval, the durable audit row of every decision about an active subject
-- (docs/architecture.md §4 item 11, §6, §8; decision 0000 (ADR-0118 §6): admission and audit before the body is read), an
-- unknown token or a disabled subject refused with no write at all, floods included (decision 0006), and invalid
-- arguments (nothing audited).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(129);

-- The same plus every audit row.
create function pg_temp.astate() returns text language sql
return concat_ws(E'\n', pg_temp.pstate(),
  (select string_agg('audit ' || a::text, E'\n' order by a.id) from ql.security_audit a));

create function pg_temp.audit_count() returns bigint language sql
return (select count(*) from ql.security_audit);

-- Tuples of schema ql this transaction inserted, updated or deleted so far (a rolled-back write included).
create function pg_temp.writes() returns bigint language sql
return (select coalesce(sum(t.n_tup_ins + t.n_tup_upd + t.n_tup_del), 0)::bigint
          from pg_stat_xact_user_tables t where t.schemaname = 'ql');

-- The route the shell names for a permission.
create function pg_temp.route_of(p_permission text) returns text language sql immutable
return case p_permission
  when 'run.start' then 'POST /api/v3/projects/{projectId}/runs'
  when 'run.stop' then 'POST /api/v3/projects/{projectId}/runs/{runId}/cancellation'
  else 'GET /api/v3/projects/{projectId}/runs/{runId}' end;

-- The shell's call: only the digest of the bearer token crosses into the database.
create function pg_temp.admit(p_token text, p_project uuid, p_permission text, p_request_id text,
                              p_route text default null)
returns jsonb language sql
return ql_api.request_admission_v1(sha256(convert_to(p_token, 'UTF8')), p_project, p_permission,
                                   coalesce(p_route, pg_temp.route_of(p_permission)), p_request_id);

-- Four assertions for one audited decision: the exact answer (auditId = the row written), exactly one audit
-- row with that request id and exact fields, exactly one new audit row in all, nothing else changed.
create function pg_temp.audited(p_case text, p_res jsonb, p_audits_before bigint, p_state_before text,
                                p_decision text, p_reason text, p_subject uuid, p_kind text, p_project uuid,
                                p_permission text, p_request_id text, p_pv bigint, p_bv bigint,
                                p_route text default null)
returns setof text language plpgsql as $$
declare
  v_route text := coalesce(p_route, pg_temp.route_of(p_permission));
begin
  return next is(p_res,
    (select jsonb_build_object('decision', p_decision, 'reason', p_reason, 'subjectId', p_subject, 'subjectKind', p_kind,
                               'projectVersion', p_pv, 'bindingVersion', p_bv, 'auditId', a.id)
       from ql.security_audit a where a.request_id = p_request_id),
    p_case || ': answers ' || p_decision || ' ' || p_reason
      || case when p_pv is null then ' without versions' else ' with the project and binding versions' end);
  return next is(
    (select jsonb_agg(jsonb_build_object('subjectId', a.subject_id, 'workerId', a.worker_id, 'route', a.route,
                                         'projectId', a.project_id, 'permission', a.permission,
                                         'decision', a.decision, 'reason', a.reason, 'requestId', a.request_id))
       from ql.security_audit a where a.request_id = p_request_id),
    jsonb_build_array(jsonb_build_object('subjectId', p_subject, 'workerId', null, 'route', v_route,
                                         'projectId', p_project, 'permission', p_permission,
                                         'decision', p_decision, 'reason', p_reason, 'requestId', p_request_id)),
    p_case || ': one audit row records the exact subject, route, project, permission, decision, reason and request id');
  return next is(pg_temp.audit_count(), p_audits_before + 1, p_case || ': exactly one new audit row in all');
  return next is(pg_temp.pstate(), p_state_before, p_case || ': and nothing else changes');
end $$;

-- Four assertions for one unauthenticated refusal (decision 0006): the exact answer, auditId the nil uuid, no audit
-- row with its request id, not one tuple of schema ql written, nothing changed.
create function pg_temp.unaudited(p_case text, p_res jsonb, p_writes_before bigint, p_state_before text,
                                  p_reason text, p_subject uuid, p_kind text, p_request_id text)
returns setof text language plpgsql as $$
begin
  return next is(p_res,
    jsonb_build_object('decision', 'deny', 'reason', p_reason, 'subjectId', p_subject, 'subjectKind', p_kind,
                       'projectVersion', null, 'bindingVersion', null,
                       'auditId', '00000000-0000-0000-0000-000000000000'),
    p_case || ': answers deny ' || p_reason || ' with the nil uuid as auditId (nothing audited)');
  return next is((select count(*) from ql.security_audit a where a.request_id = p_request_id), 0::bigint,
    p_case || ': no audit row');
  return next is(pg_temp.writes(), p_writes_before, p_case || ': not one tuple of schema ql inserted, updated or deleted');
  return next is(pg_temp.astate(), p_state_before, p_case || ': and nothing changes');
end $$;

-- Rows of every table of schema ql whose text shows the needle (a raw token, its hex or its base64).
create function pg_temp.hits(p_needle text) returns bigint language plpgsql as $$
declare
  v_table regclass;
  v_count bigint;
  v_total bigint := 0;
begin
  for v_table in select c.oid::regclass from pg_class c join pg_namespace n on n.oid = c.relnamespace
                  where n.nspname = 'ql' and c.relkind in ('r', 'p') loop
    execute format('select count(*) from %s t where strpos(t::text, %L) > 0 or strpos(t::text, %L) > 0 '
                   'or strpos(t::text, %L) > 0', v_table, p_needle,
                   encode(convert_to(p_needle, 'UTF8'), 'hex'), encode(convert_to(p_needle, 'UTF8'), 'base64'))
      into v_count;
    v_total := v_total + v_count;
  end loop;
  return v_total;
end $$;

-- ---------------------------------------------------------------------------------------------
-- Structure: the one admission command, SECURITY DEFINER, EXECUTE for the runtime role only.
select has_function('ql_api', 'request_admission_v1', array['bytea', 'uuid', 'text', 'text', 'text'],
  'admission exists with (token digest, project, permission, route, request id)');
select is_definer('ql_api', 'request_admission_v1', array['bytea', 'uuid', 'text', 'text', 'text'],
  'admission is SECURITY DEFINER');
select function_returns('ql_api', 'request_admission_v1', array['bytea', 'uuid', 'text', 'text', 'text'], 'jsonb',
  'admission answers a jsonb result');
select is((select p.proconfig from pg_proc p where p.oid = 'ql_api.request_admission_v1(bytea, uuid, text, text, text)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'admission pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'request_admission_v1', array['bytea', 'uuid', 'text', 'text', 'text'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute admission');
select function_privs_are('ql_api', 'request_admission_v1', array['bytea', 'uuid', 'text', 'text', 'text'],
  'public', array[]::text[], 'PUBLIC may not execute admission');
select is((select p.proargnames[1] || ':' || format_type(p.proargtypes[0], null) from pg_proc p
            where p.oid = 'ql_api.request_admission_v1(bytea, uuid, text, text, text)'::regprocedure),
  'p_token_digest:bytea', 'the bearer token crosses into the database only as a digest parameter');
set local role ql_runtime;
select throws_ok($$insert into ql.security_audit (at_ms, route, decision, reason, request_id) values (1, 'r', 'allow', 'ok', 'x')$$,
  '42501', 'permission denied for schema ql', 'the runtime role cannot write an audit row outside admission');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Setup: project P at version 7 with one user per role (binding versions 1..4), an agent operator, an agent
-- viewer, a disabled operator, a revoked operator and a subject without binding; archived project A.
select pg_temp.mk_project('adm-p') as p, pg_temp.mk_project('adm-a') as a, gen_random_uuid() as missing \gset
update ql.projects set version = 7 where id = :'p';
update ql.projects set status = 'archived', version = 3 where id = :'a';
select pg_temp.mk_subject('owner') as s_owner, pg_temp.mk_subject('admin') as s_admin,
       pg_temp.mk_subject('operator') as s_operator, pg_temp.mk_subject('viewer') as s_viewer,
       pg_temp.mk_subject('agent', 'agent') as s_agent, pg_temp.mk_subject('agentviewer', 'agent') as s_agentviewer,
       pg_temp.mk_subject('disabled', 'user', 'disabled') as s_disabled,
       pg_temp.mk_subject('revoked') as s_revoked, pg_temp.mk_subject('loose') as s_loose \gset
insert into ql.role_bindings (project_id, subject_id, role, version, active)
values (:'p', :'s_owner', 'owner', 1, true), (:'p', :'s_admin', 'admin', 2, true),
       (:'p', :'s_operator', 'operator', 3, true), (:'p', :'s_viewer', 'viewer', 4, true),
       (:'p', :'s_agent', 'operator', 5, true), (:'p', :'s_agentviewer', 'viewer', 1, true),
       (:'p', :'s_disabled', 'operator', 1, true), (:'p', :'s_revoked', 'operator', 2, false),
       (:'a', :'s_operator', 'operator', 6, true), (:'a', :'s_viewer', 'viewer', 2, true);

-- ---------------------------------------------------------------------------------------------
-- allow / ok for each role and permission of ql.role_allows; viewer start/stop are role.insufficient.
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select jsonb_agg(jsonb_build_object('role', r.role, 'permission', pm.permission,
                                    'res', pg_temp.admit('tok-' || r.role, :'p', pm.permission, 'm.' || r.role || '.' || pm.permission))
                 order by r.role, pm.permission) as matrix
  from (values ('owner'), ('admin'), ('operator'), ('viewer')) r(role)
  cross join (values ('run.read'), ('run.start'), ('run.stop')) pm(permission) \gset
reset role;
create temp table matrix as select e from jsonb_array_elements(:'matrix'::jsonb) e;
select results_eq(
  $$select e ->> 'role', e ->> 'permission', e -> 'res' ->> 'decision', e -> 'res' ->> 'reason',
           (e -> 'res' ->> 'projectVersion')::bigint, (e -> 'res' ->> 'bindingVersion')::bigint,
           s.name, e -> 'res' ->> 'subjectKind'
      from pg_temp.matrix m join ql.subjects s on s.id = (e -> 'res' ->> 'subjectId')::uuid
     order by 1, 2$$,
  $$values ('admin'::text, 'run.read'::text, 'allow'::text, 'ok'::text, 7::bigint, 2::bigint, 'admin'::text, 'user'::text),
           ('admin', 'run.start', 'allow', 'ok', 7, 2, 'admin', 'user'),
           ('admin', 'run.stop', 'allow', 'ok', 7, 2, 'admin', 'user'),
           ('operator', 'run.read', 'allow', 'ok', 7, 3, 'operator', 'user'),
           ('operator', 'run.start', 'allow', 'ok', 7, 3, 'operator', 'user'),
           ('operator', 'run.stop', 'allow', 'ok', 7, 3, 'operator', 'user'),
           ('owner', 'run.read', 'allow', 'ok', 7, 1, 'owner', 'user'),
           ('owner', 'run.start', 'allow', 'ok', 7, 1, 'owner', 'user'),
           ('owner', 'run.stop', 'allow', 'ok', 7, 1, 'owner', 'user'),
           ('viewer', 'run.read', 'allow', 'ok', 7, 4, 'viewer', 'user'),
           ('viewer', 'run.start', 'deny', 'role.insufficient', null, null, 'viewer', 'user'),
           ('viewer', 'run.stop', 'deny', 'role.insufficient', null, null, 'viewer', 'user')$$,
  'owner/admin/operator are allowed run.read/start/stop with the project and binding versions; a viewer only run.read');
select results_eq(
  format($$select s.name, a.route, a.project_id = %L, a.permission, a.decision, a.reason, a.request_id, a.worker_id
             from ql.security_audit a join ql.subjects s on s.id = a.subject_id
            where a.request_id like 'm.%%' order by a.request_id$$, :'p'),
  $$values ('admin'::text, 'GET /api/v3/projects/{projectId}/runs/{runId}'::text, true, 'run.read'::text, 'allow'::text, 'ok'::text, 'm.admin.run.read'::text, null::uuid),
           ('admin', 'POST /api/v3/projects/{projectId}/runs', true, 'run.start', 'allow', 'ok', 'm.admin.run.start', null),
           ('admin', 'POST /api/v3/projects/{projectId}/runs/{runId}/cancellation', true, 'run.stop', 'allow', 'ok', 'm.admin.run.stop', null),
           ('operator', 'GET /api/v3/projects/{projectId}/runs/{runId}', true, 'run.read', 'allow', 'ok', 'm.operator.run.read', null),
           ('operator', 'POST /api/v3/projects/{projectId}/runs', true, 'run.start', 'allow', 'ok', 'm.operator.run.start', null),
           ('operator', 'POST /api/v3/projects/{projectId}/runs/{runId}/cancellation', true, 'run.stop', 'allow', 'ok', 'm.operator.run.stop', null),
           ('owner', 'GET /api/v3/projects/{projectId}/runs/{runId}', true, 'run.read', 'allow', 'ok', 'm.owner.run.read', null),
           ('owner', 'POST /api/v3/projects/{projectId}/runs', true, 'run.start', 'allow', 'ok', 'm.owner.run.start', null),
           ('owner', 'POST /api/v3/projects/{projectId}/runs/{runId}/cancellation', true, 'run.stop', 'allow', 'ok', 'm.owner.run.stop', null),
           ('viewer', 'GET /api/v3/projects/{projectId}/runs/{runId}', true, 'run.read', 'allow', 'ok', 'm.viewer.run.read', null),
           ('viewer', 'POST /api/v3/projects/{projectId}/runs', true, 'run.start', 'deny', 'role.insufficient', 'm.viewer.run.start', null),
           ('viewer', 'POST /api/v3/projects/{projectId}/runs/{runId}/cancellation', true, 'run.stop', 'deny', 'role.insufficient', 'm.viewer.run.stop', null)$$,
  'every decision of the matrix, allow and deny, is one audit row with its exact subject, route, project, permission, decision, reason and request id');
select is((select count(*) from pg_temp.matrix m join ql.security_audit a on a.id = (e -> 'res' ->> 'auditId')::uuid
            where a.request_id = 'm.' || (e ->> 'role') || '.' || (e ->> 'permission')), 12::bigint,
  'each answer names its own audit row (auditId)');
select is(pg_temp.audit_count(), (:n + 12)::bigint, 'the twelve decisions wrote exactly twelve audit rows');
select is(pg_temp.pstate(), :'before', 'the matrix of decisions changes nothing but the audit');

-- The audit row is stamped with database time.
select ql.now_ms() as t0 \gset
set local role ql_runtime;
select pg_temp.admit('tok-operator', :'p', 'run.stop', 'time.1') as res \gset
reset role;
select ql.now_ms() as t1 \gset
select ok((select a.at_ms between :t0 and :t1 from ql.security_audit a where a.request_id = 'time.1'),
  'the audit row is stamped with database time read during the call');

-- ---------------------------------------------------------------------------------------------
-- Unauthenticated (decision 0006): deny auth.unknown_token (no subject) and auth.subject_disabled (the binding would
-- allow) answer without versions and write nothing at all: no audit row, not one tuple.
select pg_temp.astate() as before, pg_temp.writes() as w \gset
set local role ql_runtime;
select pg_temp.admit('tok-nobody', :'p', 'run.read', 'deny.unknown') as res \gset
reset role;
select * from pg_temp.unaudited('an unknown token', :'res', :w, :'before', 'auth.unknown_token', null, null,
  'deny.unknown');
set local role ql_runtime;
select pg_temp.admit('tok-nobody', :'missing', 'run.stop', 'deny.unknown.missing') as res \gset
reset role;
select * from pg_temp.unaudited('an unknown token on a missing project', :'res', :w, :'before', 'auth.unknown_token',
  null, null, 'deny.unknown.missing');
set local role ql_runtime;
select pg_temp.admit('', :'p', 'run.start', 'deny.unknown.empty') as res \gset
reset role;
select * from pg_temp.unaudited('the empty token''s digest (no subject can hold it)', :'res', :w, :'before',
  'auth.unknown_token', null, null, 'deny.unknown.empty');
set local role ql_runtime;
select pg_temp.admit('tok-disabled', :'p', 'run.read', 'deny.disabled') as res \gset
reset role;
select * from pg_temp.unaudited('a disabled subject', :'res', :w, :'before', 'auth.subject_disabled', :'s_disabled',
  'user', 'deny.disabled');
set local role ql_runtime;
select pg_temp.admit('tok-disabled', :'missing', 'run.stop', 'deny.disabled.missing') as res \gset
reset role;
select * from pg_temp.unaudited('a disabled subject on a missing project', :'res', :w, :'before',
  'auth.subject_disabled', :'s_disabled', 'user', 'deny.disabled.missing');

-- A flood: 300 unknown tokens and 300 calls of the disabled subject, every permission, write nothing.
set local role ql_runtime;
select count(*) filter (where r ->> 'reason' = 'auth.unknown_token'
                         and r ->> 'auditId' = '00000000-0000-0000-0000-000000000000') as unknown,
       count(*) filter (where r ->> 'reason' = 'auth.subject_disabled'
                         and r ->> 'auditId' = '00000000-0000-0000-0000-000000000000') as disabled
  from (select pg_temp.admit(case when i % 2 = 0 then 'flood-' || i else 'tok-disabled' end, :'p',
                             (array['run.read', 'run.start', 'run.stop'])[1 + i % 3], 'flood.' || i) r
          from generate_series(1, 600) i) f \gset
reset role;
select is(array[:unknown, :disabled]::bigint[], array[300, 300]::bigint[],
  'a flood of 600 unauthenticated calls answers 300 auth.unknown_token and 300 auth.subject_disabled, none audited');
select is(pg_temp.writes(), :w::bigint, 'the flood writes not one tuple of schema ql');
select is(pg_temp.astate(), :'before', 'the flood changes nothing (no audit row, no aggregate)');

-- The probe sees writes: one admission of an active subject is exactly one tuple, its audit row.
set local role ql_runtime;
select pg_temp.admit('tok-viewer', :'p', 'run.read', 'probe.writes') as res \gset
reset role;
select is(pg_temp.writes(), (:w + 1)::bigint, 'an active subject''s admission writes exactly one tuple (the probe sees writes)');

-- deny project.not_found: a missing project, no binding, an inactive binding — indistinguishable.
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-loose', :'missing', 'run.read', 'deny.missing') as res_missing \gset
reset role;
select * from pg_temp.audited('a missing project', :'res_missing', :n, :'before', 'deny', 'project.not_found',
  :'s_loose', 'user', :'missing', 'run.read', 'deny.missing', null, null);
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-loose', :'p', 'run.read', 'deny.nobinding') as res_nobinding \gset
reset role;
select * from pg_temp.audited('a project where the subject has no binding', :'res_nobinding', :n, :'before', 'deny',
  'project.not_found', :'s_loose', 'user', :'p', 'run.read', 'deny.nobinding', null, null);
select is(:'res_nobinding'::jsonb - 'auditId', :'res_missing'::jsonb - 'auditId',
  'a project without the subject''s binding answers exactly like a missing project (no enumeration)');
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-revoked', :'p', 'run.read', 'deny.inactive') as res_inactive \gset
reset role;
select * from pg_temp.audited('an inactive (revoked) binding', :'res_inactive', :n, :'before', 'deny',
  'project.not_found', :'s_revoked', 'user', :'p', 'run.read', 'deny.inactive', null, null);
set local role ql_runtime;
select pg_temp.admit('tok-revoked', :'missing', 'run.read', 'deny.inactive.missing') as res_inactive_missing \gset
reset role;
select is(:'res_inactive'::jsonb - 'auditId', :'res_inactive_missing'::jsonb - 'auditId',
  'a revoked binding answers exactly like a missing project');

-- deny project.archived for run.start and run.stop; run.read on an archived project is allowed.
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-operator', :'a', 'run.start', 'deny.archived.start') as res \gset
reset role;
select * from pg_temp.audited('run.start on an archived project', :'res', :n, :'before', 'deny', 'project.archived',
  :'s_operator', 'user', :'a', 'run.start', 'deny.archived.start', null, null);
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-operator', :'a', 'run.stop', 'deny.archived.stop') as res \gset
reset role;
select * from pg_temp.audited('run.stop on an archived project', :'res', :n, :'before', 'deny', 'project.archived',
  :'s_operator', 'user', :'a', 'run.stop', 'deny.archived.stop', null, null);
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-viewer', :'a', 'run.read', 'allow.archived.read') as res \gset
reset role;
select * from pg_temp.audited('run.read on an archived project', :'res', :n, :'before', 'allow', 'ok',
  :'s_viewer', 'user', :'a', 'run.read', 'allow.archived.read', 3, 2);

-- deny role.insufficient: a viewer stopping a Run.
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-viewer', :'p', 'run.stop', 'deny.viewer.stop') as res \gset
reset role;
select * from pg_temp.audited('a viewer stopping a Run', :'res', :n, :'before', 'deny', 'role.insufficient',
  :'s_viewer', 'user', :'p', 'run.stop', 'deny.viewer.stop', null, null);

-- require_approval agent.approval_required: an agent with the operator role stopping a Run; its run.start is allowed.
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-agent', :'p', 'run.stop', 'approval.agent.stop') as res \gset
reset role;
select * from pg_temp.audited('an agent operator stopping a Run', :'res', :n, :'before', 'require_approval',
  'agent.approval_required', :'s_agent', 'agent', :'p', 'run.stop', 'approval.agent.stop', null, null);
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-agent', :'p', 'run.start', 'allow.agent.start') as res \gset
reset role;
select * from pg_temp.audited('an agent operator starting a Run', :'res', :n, :'before', 'allow', 'ok',
  :'s_agent', 'agent', :'p', 'run.start', 'allow.agent.start', 7, 5);
select pg_temp.pstate() as before, pg_temp.audit_count() as n \gset
set local role ql_runtime;
select pg_temp.admit('tok-agentviewer', :'p', 'run.stop', 'deny.agentviewer.stop') as res \gset
reset role;
select * from pg_temp.audited('an agent viewer stopping a Run', :'res', :n, :'before', 'deny', 'role.insufficient',
  :'s_agentviewer', 'agent', :'p', 'run.stop', 'deny.agentviewer.stop', null, null);

-- Boundaries that are still valid: a 200-character route and a 128-character request id.
select pg_temp.pstate() as before, pg_temp.audit_count() as n, repeat('r', 200) as route200,
       repeat('Az09._:-', 16) as req128 \gset
set local role ql_runtime;
select pg_temp.admit('tok-owner', :'p', 'run.read', :'req128', :'route200') as res \gset
reset role;
select * from pg_temp.audited('a 200-character route and a 128-character request id', :'res', :n, :'before', 'allow', 'ok',
  :'s_owner', 'user', :'p', 'run.read', :'req128', 7, 1, :'route200');

-- ---------------------------------------------------------------------------------------------
-- invalid: a shell bug, answered {"status":"invalid","reason"} with nothing audited and nothing changed.
select pg_temp.astate() as before, pg_temp.digest('tok-owner') as d, repeat('r', 201) as route201,
       repeat('a', 129) as req129, pg_temp.route_of('run.read') as route \gset
set local role ql_runtime;
select is(ql_api.request_admission_v1(null, :'p', 'run.read', :'route', 'inv.1'),
  '{"status": "invalid", "reason": "token_digest"}', 'a NULL token digest is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'NULL token digest is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(substring(:'d'::bytea from 1 for 31), :'p', 'run.read', :'route', 'inv.2'),
  '{"status": "invalid", "reason": "token_digest"}', 'a 31-byte digest is invalid');
reset role;
select is(pg_temp.astate(), :'before', '31-byte digest is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d'::bytea || '\x00'::bytea, :'p', 'run.read', :'route', 'inv.3'),
  '{"status": "invalid", "reason": "token_digest"}', 'a 33-byte digest is invalid');
reset role;
select is(pg_temp.astate(), :'before', '33-byte digest is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(''::bytea, :'p', 'run.read', :'route', 'inv.4'),
  '{"status": "invalid", "reason": "token_digest"}', 'an empty digest is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'empty digest is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(convert_to('tok-owner', 'UTF8'), :'p', 'run.read', :'route', 'inv.5'),
  '{"status": "invalid", "reason": "token_digest"}', 'a raw bearer token passed by mistake is refused as an invalid digest');
reset role;
select is(pg_temp.astate(), :'before', 'raw token instead of a digest is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', null, 'run.read', :'route', 'inv.6'),
  '{"status": "invalid", "reason": "project_id"}', 'a NULL project id is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'NULL project id is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', null, :'route', 'inv.7'),
  '{"status": "invalid", "reason": "permission"}', 'a NULL permission is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'NULL permission is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.delete', :'route', 'inv.8'),
  '{"status": "invalid", "reason": "permission"}', 'an unknown permission is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'unknown permission is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'RUN.STOP', :'route', 'inv.9'),
  '{"status": "invalid", "reason": "permission"}', 'permissions are exact: RUN.STOP is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'upper-case permission is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', null, 'inv.10'),
  '{"status": "invalid", "reason": "route"}', 'a NULL route is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'NULL route is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', '', 'inv.11'),
  '{"status": "invalid", "reason": "route"}', 'an empty route is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'empty route is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', :'route201', 'inv.12'),
  '{"status": "invalid", "reason": "route"}', 'a 201-character route is invalid');
reset role;
select is(pg_temp.astate(), :'before', '201-character route is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', :'route', null),
  '{"status": "invalid", "reason": "request_id"}', 'a NULL request id is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'NULL request id is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', :'route', ''),
  '{"status": "invalid", "reason": "request_id"}', 'an empty request id is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'empty request id is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', :'route', 'bad id'),
  '{"status": "invalid", "reason": "request_id"}', 'a request id with a space is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'request id with a space is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', :'route', 'a/b'),
  '{"status": "invalid", "reason": "request_id"}', 'a request id with a slash is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'request id with a slash is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', :'route', E'req\n1'),
  '{"status": "invalid", "reason": "request_id"}', 'a request id with a control character is invalid');
reset role;
select is(pg_temp.astate(), :'before', 'request id with a newline is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(:'d', :'p', 'run.read', :'route', :'req129'),
  '{"status": "invalid", "reason": "request_id"}', 'a 129-character request id is invalid');
reset role;
select is(pg_temp.astate(), :'before', '129-character request id is invalid: nothing audited and nothing changes');
set local role ql_runtime;
select is(ql_api.request_admission_v1(null, null, null, null, null),
  '{"status": "invalid", "reason": "token_digest"}', 'arguments are checked in order: all NULL reports the token digest first');
reset role;
select is(pg_temp.astate(), :'before', 'all-NULL call is invalid: nothing audited and nothing changes');

-- ---------------------------------------------------------------------------------------------
-- The bearer token itself appears nowhere in the database (text, hex or base64), only its digest.
select is(pg_temp.hits(t.tok), 0::bigint, 'the bearer token ' || t.tok || ' appears in no row of schema ql')
  from (values ('tok-owner'), ('tok-operator'), ('tok-agent'), ('tok-nobody')) t(tok);
select ok(pg_temp.hits('adm-p') > 0 and pg_temp.hits('deny.missing') > 0,
  'the scan does see stored text (a project name, a request id)');
select is((select count(*) from ql.subjects s where s.token_digest = pg_temp.digest('tok-operator')), 1::bigint,
  'the subject holds only the SHA-256 of its token');
select is((select count(*) from ql.security_audit a where a.subject_id is null), 0::bigint,
  'no audit row without a subject: an unknown token leaves no row (and no trace of the token)');

select * from finish();
rollback;
