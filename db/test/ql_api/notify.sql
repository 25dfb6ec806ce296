-- Tests notifications (docs/decisions/0023-notifications.md): the outbox writers (ql.notify_emit, the triggers
-- ql.notify_run_event and ql.notify_schedule_skipped), the rule functions ql_api.notify_rule_set_v1,
-- notify_rule_remove_v1, notify_rule_list_v1, notify_deliveries_v1, and the dispatcher's ql_api.notify_claim_v1,
-- notify_result_v1, notify_worker_scan_v1, notify_prune_v1. Claiming under concurrency (SKIP LOCKED between two
-- sessions) needs committed rows and two connections: tests/integration/db/test_notify_claims.py.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(75);

create function pg_temp.who(p_name text, p_project uuid, out subject uuid, out pv bigint, out bv bigint)
language sql security definer
return (select (s.id, coalesce(p.version, 0), coalesce(b.version, 0)) from ql.subjects s
          left join ql.projects p on p.id = p_project
          left join ql.role_bindings b on b.subject_id = s.id and b.project_id = p_project
         where s.name = p_name);
create function pg_temp.rule(p_subject text, p_project uuid, p_name text, p_events text[], p_channel text default 'webhook',
                             p_url text default 'https://hooks.example/ql', p_secret text default 'HOOK_KEY',
                             p_template text default null)
returns jsonb language sql
return (select ql_api.notify_rule_set_v1(w.subject, p_project, p_name, p_events, p_channel, p_url, p_secret, p_template,
                                         w.pv, w.bv) from pg_temp.who(p_subject, p_project) w);
create function pg_temp.unrule(p_subject text, p_project uuid, p_name text) returns jsonb language sql
return (select ql_api.notify_rule_remove_v1(w.subject, p_project, p_name, w.pv, w.bv) from pg_temp.who(p_subject, p_project) w);
-- Everything the notification functions may write.
create function pg_temp.nstate() returns text language sql security definer
return concat_ws(E'\n',
  (select string_agg('rule ' || r::text, E'\n' order by r.id) from ql.notify_rules r),
  (select string_agg('outbox ' || o::text, E'\n' order by o.id) from ql.notify_outbox o),
  (select string_agg('delivery ' || d::text, E'\n' order by d.outbox_id, d.attempt_no) from ql.notify_deliveries d),
  (select string_agg('seen ' || n::text, E'\n' order by n.session_id) from ql.notify_offline_seen n));
create function pg_temp.outbox(p_project uuid) returns text[] language sql security definer
return array(select o.kind from ql.notify_outbox o where o.project_id = p_project order by o.created_at_ms, o.kind);
create function pg_temp.claim(p_limit int default 10, p_lease bigint default 30000) returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_notify;
  v := ql_api.notify_claim_v1(p_limit, p_lease);
  reset role;
  return v;
end $$;
create function pg_temp.result(p_id uuid, p_no int, p_ok boolean, p_code int, p_error text, p_ms int default 12)
returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_notify;
  v := ql_api.notify_result_v1(p_id, p_no, p_ok, p_code, p_error, p_ms);
  reset role;
  return v;
end $$;

-- ---------------------------------------------------------------------------------------------
-- Setup: Project P (operator, viewer) with the secret HOOK_KEY; Project Q without rules.
select pg_temp.mk_project('ntf-p') as p, pg_temp.mk_project('ntf-q') as q \gset
select pg_temp.mk_subject('ntf-op') as op, pg_temp.mk_subject('ntf-viewer') as viewer \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'p', :'op', 'operator'), (:'p', :'viewer', 'viewer'),
  (:'q', :'op', 'operator');
insert into ql.secrets (project_id, name, current_version, created_at_ms, updated_at_ms)
values (:'p', 'HOOK_KEY', 1, ql.now_ms(), ql.now_ms());
insert into ql.secret_versions (id, secret_id, version, size, kek_id, wrapped_key, nonce, ciphertext, created_by, created_at_ms)
select gen_random_uuid(), s.id, 1, 4, 'kek-AAAAAAAA', decode(repeat('11', 60), 'hex'), decode(repeat('22', 12), 'hex'),
       decode(repeat('33', 20), 'hex'), :'op', ql.now_ms()
  from ql.secrets s where s.project_id = :'p';
update ql.settings set notify_backoff_base_ms = 1000, notify_backoff_cap_ms = 3000, notify_max_attempts = 4;

-- ---------------------------------------------------------------------------------------------
-- Rules: bad input is a typed refusal that changes nothing.
select pg_temp.nstate() as before \gset
set local role ql_runtime;
select is(pg_temp.rule('ntf-op', :'p', 'Bad Name', '{run.failed}') ->> 'reason', 'name', 'a name out of its pattern: invalid name');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.exploded}') ->> 'reason', 'events', 'an unknown event: invalid events');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{}') ->> 'reason', 'events', 'no event: invalid events');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed,run.failed}') ->> 'reason', 'events', 'an event twice: invalid events');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'email') ->> 'reason', 'channel', 'an unknown channel: invalid channel');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'webhook', 'https://x.example/h?key=abc') ->> 'reason', 'url',
  'a URL carrying a credential (?key=): invalid url');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'webhook', 'https://u:pw@x.example/h') ->> 'reason', 'url',
  'a URL with user:password@: invalid url');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'webhook', 'ftp://x.example/h') ->> 'reason', 'url',
  'not http(s): invalid url');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'wecom', 'https://x.example/h') ->> 'reason', 'url',
  'a wecom rule takes no URL (the dispatcher''s robot endpoint): invalid url');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'webhook', 'https://x.example/h', 'hook_key') ->> 'reason',
  'secret_name', 'a secret name out of its pattern: invalid secret_name');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'webhook', 'https://x.example/h', 'HOOK_KEY', 'hi') ->> 'reason',
  'template', 'a template on a webhook rule: invalid template');
select is(pg_temp.rule('ntf-op', :'p', 'r1', '{run.failed}', 'webhook', 'https://x.example/h', 'NO_SUCH') ->> 'reason',
  'secret', 'a secret the Project does not have: not_found secret');
select is(pg_temp.rule('ntf-viewer', :'p', 'r1', '{run.failed}') ->> 'reason', 'role_insufficient',
  'a viewer cannot set a rule: fenced role_insufficient');
select is(ql_api.notify_rule_set_v1((select subject from pg_temp.who('ntf-op', :'p')), :'p', 'r1', '{run.failed}', 'webhook',
  'https://x.example/h', 'HOOK_KEY', null, null, 1) ->> 'reason', 'admitted_version', 'no admitted version: invalid');
select is(pg_temp.rule('ntf-op', :'q', 'r1', '{run.failed}') ->> 'reason', 'secret',
  'another Project''s secret is not found');
reset role;
select is(pg_temp.nstate(), :'before', 'no refused rule call changed anything');

-- Rules are set, kept by name, listed.
set local role ql_runtime;
select is(pg_temp.rule('ntf-op', :'p', 'hook', '{run.failed,run.timed_out,run.cancelled,run.lost,run.succeeded_after_failure,schedule.skipped,worker.offline}') ->> 'status',
  'created', 'an operator creates a webhook rule');
select is(pg_temp.rule('ntf-op', :'p', 'hook', '{run.failed,run.timed_out,run.cancelled,run.lost,run.succeeded_after_failure,schedule.skipped,worker.offline}') ->> 'status',
  'unchanged', 'the same rule again: unchanged');
select is(pg_temp.rule('ntf-op', :'p', 'chat', '{run.timed_out}', 'wecom', null, 'HOOK_KEY', 'Run {task} {event}') ->> 'status',
  'created', 'a wecom rule with a template');
select is(pg_temp.rule('ntf-op', :'p', 'chat', '{run.timed_out,run.lost}', 'wecom', null, 'HOOK_KEY', 'Run {task} {event}') ->> 'status',
  'updated', 'a changed rule: updated, same id');
select is(jsonb_path_query_array(ql_api.notify_rule_list_v1('ntf-p'), '$.rules[*].name'), '["chat", "hook"]',
  'the list names both rules');
select is(ql_api.notify_rule_list_v1('ntf-p') -> 'rules' -> 0 ->> 'secretName', 'HOOK_KEY', 'a rule names its secret, never a value');
select is(ql_api.notify_rule_list_v1('no-such') ->> 'reason', 'project', 'an unknown Project: not_found project');
reset role;

-- ---------------------------------------------------------------------------------------------
-- The outbox row is written by the transaction that ends the Run (the Worker's completion here), and only then.
select pg_temp.mk_revision(:'p', '{"argv": ["true"], "pool": "ntf"}') as rev_p,
       pg_temp.mk_revision(:'q', '{"argv": ["true"], "pool": "ntf-q"}') as rev_q \gset
select pg_temp.mk_run(:'rev_p') as run1 \gset
select pg_temp.mk_worker('ntf') as w \gset
select pg_temp.offer_at(:'w') as o1 \gset
select is(pg_temp.outbox(:'p'), '{}', 'a running Run has notified nothing');
-- A completion whose transaction rolls back leaves no outbox row.
create function pg_temp.complete_then_fail(p_worker uuid, o jsonb) returns void language plpgsql as $$
begin
  if pg_temp.complete(p_worker, (o ->> 'sessionId')::uuid, o, 1, 3) ->> 'runStatus' <> 'failed' then
    raise exception 'not failed';
  end if;
  raise exception using errcode = 'P0001', message = 'rolled back';
end $$;
select throws_ok(format('select pg_temp.complete_then_fail(%L, %L)', :'w', :'o1'), 'P0001', 'rolled back',
  'a completion that ends the Run failed, in a transaction that then rolls back');
select is(pg_temp.outbox(:'p'), '{}', 'its outbox row rolled back with it');
set local role ql_runtime;
select is(pg_temp.complete(:'w', (:'o1'::jsonb ->> 'sessionId')::uuid, :'o1', 1, 3) ->> 'runStatus', 'failed',
  'the Worker completes the Run: failed (exit 3, one attempt)');
reset role;
select is(pg_temp.outbox(:'p'), '{run.failed}', 'the completion''s transaction wrote one row, for the rule that names run.failed');
select is((select o.payload ->> 'runId' from ql.notify_outbox o where o.project_id = :'p'), :'run1',
  'its payload names the Run');
select ok((select o.xmin = e.xmin from ql.notify_outbox o, ql.run_events e
            where o.project_id = :'p' and e.run_id = :'run1' and e.type = 'run.failed'),
  'the outbox row and the run.failed event were written by one transaction');

-- No rule names the event: nothing is written.
select pg_temp.mk_run(:'rev_p') as run2 \gset
select pg_temp.offer_at(:'w') as o2 \gset
set local role ql_runtime;
select is(pg_temp.complete(:'w', (:'o2'::jsonb ->> 'sessionId')::uuid, :'o2', 1, 0) ->> 'runStatus', 'succeeded',
  'a first Attempt succeeds');
reset role;
select is(pg_temp.outbox(:'p'), '{run.failed}', 'a first Attempt''s success notifies nothing');
select pg_temp.mk_run(:'rev_q') as run3 \gset
select pg_temp.mk_worker('ntf-q') as wq \gset
select pg_temp.offer_at(:'wq') as o3 \gset
set local role ql_runtime;
select is(pg_temp.complete(:'wq', (:'o3'::jsonb ->> 'sessionId')::uuid, :'o3', 1, 1) ->> 'runStatus', 'failed',
  'a Run of Project Q fails');
reset role;
select is(pg_temp.outbox(:'q'), '{}', 'a Project without rules writes no outbox row');

-- Other ending events: cancelled, lost, succeeded after a failure, a skipped fire time.
select pg_temp.mk_run(:'rev_p') as run4 \gset
select is(ql.run_event(:'run4', 'cancelled', 'run.cancelled', 'reconciler', null, null, '{}', ql.now_ms(), 'x:' || :'run4'), 2::bigint,
  'convergence cancels a queued Run');
select is(ql.run_event(:'run4', null, 'attempt.succeeded', 'worker', null, null, '{"attemptNo": 2}', ql.now_ms(), 'y:' || :'run4'),
  3::bigint, 'an Attempt after the first succeeds');
select is(ql.run_event(:'run4', null, 'attempt.succeeded', 'worker', null, null, '{"attemptNo": 1}', ql.now_ms(), 'z:' || :'run4'),
  4::bigint, 'a first Attempt succeeds');
insert into ql.schedule_fires (task_id, fire_at_ms, project_id, decided_at_ms, outcome, run_id, blocking_run_id, caught_up)
select r.task_id, 1000, r.project_id, ql.now_ms(), 'skipped_inactive', null, null, false
  from ql.task_execution_revisions r where r.id = :'rev_p';
select is((select array_agg(o.kind order by o.kind) from ql.notify_outbox o where o.project_id = :'p'),
  '{run.cancelled,run.failed,run.succeeded_after_failure,schedule.skipped}',
  'cancelled, succeeded after a failure and a skipped fire time notify; a first success does not');
select is((select o.payload ->> 'reason' from ql.notify_outbox o where o.kind = 'schedule.skipped'), 'inactive',
  'a skipped fire time names why');

-- ---------------------------------------------------------------------------------------------
-- The dispatcher's claim: due rows, each once per lease, with the rule and the sealed secret.
select is((pg_temp.claim(0) ->> 'reason'), 'limit', 'claim: limit 0 is invalid');
select is((pg_temp.claim(10, 10) ->> 'reason'), 'lease_ms', 'claim: a lease under a second is invalid');
select pg_temp.claim(2) as c1 \gset
select is(jsonb_array_length(:'c1'::jsonb -> 'items'), 2, 'a claim takes at most its limit');
select is(:'c1'::jsonb #>> '{items,0,secret,kekId}', 'kek-AAAAAAAA', 'an item carries its secret still sealed');
select is(:'c1'::jsonb #>> '{items,0,attemptNo}', '1', 'the first claim is attempt 1');
select pg_temp.claim(10) as c2 \gset
select is(jsonb_array_length(:'c2'::jsonb -> 'items'), 2, 'the next claim takes only the rows not claimed yet');
select is(jsonb_array_length(pg_temp.claim(10) -> 'items'), 0, 'claimed rows are not due again before their lease');

-- Results: bad input is refused and changes nothing.
select (:'c1'::jsonb #>> '{items,0,id}') as n1, (:'c1'::jsonb #>> '{items,1,id}') as n2 \gset
select pg_temp.nstate() as before \gset
select is(pg_temp.result(null, 1, false, 500, null) ->> 'reason', 'outbox_id', 'result: no id');
select is(pg_temp.result(:'n1', 2, false, 500, null) ->> 'reason', 'attempt_no', 'result: an attempt never claimed');
select is(pg_temp.result(:'n1', 1, false, 99, null) ->> 'reason', 'status_code', 'result: status code out of range');
select is(pg_temp.result(:'n1', 1, false, null, 'Connection refused to https://x') ->> 'reason', 'error',
  'result: an error that is not a code (it could carry a URL)');
select is(pg_temp.result(:'n1', 1, false, null, null) ->> 'reason', 'error', 'result: a failure without a code');
select is(pg_temp.result(:'n1', 1, true, 200, null, -1) ->> 'reason', 'duration_ms', 'result: a negative duration');
select is(pg_temp.result(gen_random_uuid(), 1, true, 200, null) ->> 'reason', 'notification', 'result: an unknown id');
select is(pg_temp.nstate(), :'before', 'no refused result changed anything');

-- Backoff: base × 2^(attempt−1), capped, from database time; then dead after max attempts.
select is(pg_temp.result(:'n1', 1, false, 503, null) ->> 'status', 'retry', 'a 503: retry');
create function pg_temp.gap(p_id uuid) returns bigint language sql security definer
return (select o.next_attempt_at_ms - d.at_ms from ql.notify_outbox o join ql.notify_deliveries d on d.outbox_id = o.id
         where o.id = p_id and d.attempt_no = o.attempts);
select is(pg_temp.gap(:'n1'), 1000::bigint, 'the first retry waits the base (1000 ms)');
update ql.notify_outbox set next_attempt_at_ms = ql.now_ms() where id = :'n1';
select is(pg_temp.claim(1) #>> '{items,0,attemptNo}', '2', 'due again: claimed as attempt 2');
select is(pg_temp.result(:'n1', 2, false, null, 'timeout') ->> 'status', 'retry', 'a timeout: retry');
select is(pg_temp.gap(:'n1'), 2000::bigint, 'the second retry waits twice the base');
update ql.notify_outbox set next_attempt_at_ms = ql.now_ms() where id = :'n1';
select is((pg_temp.claim(1) #>> '{items,0,attemptNo}') || '/' || (pg_temp.result(:'n1', 3, false, 500, null) ->> 'status'), '3/retry',
  'attempt 3 fails');
select is(pg_temp.gap(:'n1'), 3000::bigint, 'the third retry waits the cap (3000 ms, not 4000)');
select is(pg_temp.result(:'n1', 1, false, 500, null) ->> 'status', 'duplicate', 'a replayed result: duplicate, nothing changes');
update ql.notify_outbox set next_attempt_at_ms = ql.now_ms() where id = :'n1';
select is((pg_temp.claim(1) #>> '{items,0,attemptNo}') || '/' || (pg_temp.result(:'n1', 4, false, 500, null) ->> 'status'), '4/dead',
  'the fourth failure spends notify_max_attempts: dead');
select is(pg_temp.result(:'n2', 1, true, 204, null) ->> 'status', 'delivered', 'a 2xx: delivered');
select is((select string_agg(d.attempt_no || ':' || d.ok || ':' || coalesce(d.status_code::text, d.error), ',' order by d.attempt_no)
             from ql.notify_deliveries d where d.outbox_id = :'n1'), '1:false:503,2:false:timeout,3:false:500,4:false:500',
  'every attempt is recorded with its status code or error');

-- A rule removed: its pending notifications are dropped; the history stays.
set local role ql_runtime;
select is(pg_temp.unrule('ntf-op', :'p', 'nope') ->> 'reason', 'rule', 'removing an unknown rule: not_found rule');
select is(pg_temp.unrule('ntf-op', :'p', 'hook') ->> 'dropped', '2', 'removing hook drops its 2 pending notifications');
select is(array(select x from jsonb_array_elements_text(jsonb_path_query_array(
                   ql_api.notify_deliveries_v1('ntf-p', 'hook', 50), '$.notifications[*].state')) x order by 1),
  '{dead,delivered,dropped,dropped}', 'the history of a removed rule stays');
select is(jsonb_path_query_first(ql_api.notify_deliveries_v1('ntf-p', 'hook', 50),
                                  '$.notifications[*] ? (@.state == "dead").deliveries.size()'), '4'::jsonb,
  'the dead notification lists its four attempts');
select is(ql_api.notify_deliveries_v1('ntf-p', null, 0) ->> 'reason', 'limit', 'deliveries: limit 0 is invalid');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Worker offline: an expired live session notifies the Projects whose tasks use its pool, once.
select pg_temp.rule('ntf-op', :'p', 'ops', '{worker.offline}') ->> 'status' as ignored \gset
select pg_temp.open_session(:'w') as s_w \gset
update ql.worker_sessions set expires_at_ms = ql.now_ms() - 1000 where id = :'s_w';
set local role ql_notify;
select is(ql_api.notify_worker_scan_v1(100) ->> 'notifications', '1', 'an expired session notifies Project P''s rule');
select is(ql_api.notify_worker_scan_v1(100) ->> 'sessions', '0', 'a second scan finds it seen');
select is(ql_api.notify_prune_v1(0) ->> 'reason', 'limit', 'prune: limit 0 is invalid');
reset role;

-- Retention: ended notifications past run_retention_days go with their attempts; pending ones stay.
update ql.notify_outbox set ended_at_ms = ended_at_ms - 91::bigint * 86400000 where id = :'n1';
update ql.notify_outbox set created_at_ms = created_at_ms - 91::bigint * 86400000 where state = 'pending';
set local role ql_notify;
select is(ql_api.notify_prune_v1(100) ->> 'notifications', '1', 'prune: the one old ended notification goes');
reset role;
select is((select count(*)::int from ql.notify_deliveries where outbox_id = :'n1'), 0, 'with its attempts');

select * from finish();
rollback;
