-- Tests ql_api.prune_v1: one page deletes at most p_limit terminal Runs that ended before now minus
-- run_retention_days, the longest ended first, with their Attempts, Leases, offers and artifacts, and never a row of
-- a live Run, of a younger terminal Run, or any event (events leave only with their partition); then ended sessions
-- that no kept offer names, mutations older than the retention and schedule fire times older than it. NULL retention and an out-of-range limit change
-- nothing; only the scheduler role may call it; run_events and security_audit stay append-only for every role.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(38);

-- Everything stored except the rows of Run p_run (its events included: prune never deletes one).
create function pg_temp.others(p_run uuid) returns text language sql
return (select string_agg(t, E'\n' order by t) from (
  select 'run ' || r::text as t from ql.runs r where r.id <> p_run union all
  select 'attempt ' || a::text from ql.run_attempts a where a.run_id <> p_run union all
  select 'lease ' || l::text from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where a.run_id <> p_run union all
  select 'artifact ' || x::text from ql.artifacts x join ql.run_attempts a on a.id = x.attempt_id where a.run_id <> p_run union all
  select 'stream ' || o::text from ql.output_streams o join ql.run_attempts a on a.id = o.attempt_id where a.run_id <> p_run union all
  select 'chunk ' || o::text from ql.output_chunks o join ql.run_attempts a on a.id = o.attempt_id where a.run_id <> p_run union all
  select 'event ' || e::text from ql.run_events e union all
  select 'audit ' || s::text from ql.security_audit s union all
  select 'session ' || s::text from ql.worker_sessions s union all
  select 'mutation ' || m::text from ql.mutations m) q);
-- The rows of Run p_run in runs, run_attempts, run_leases, artifacts and output.
create function pg_temp.rows_of(p_run uuid) returns bigint language sql
return (select count(*) from ql.runs r where r.id = p_run)
     + (select count(*) from ql.run_attempts a where a.run_id = p_run)
     + (select count(*) from ql.run_leases l join ql.run_attempts a on a.id = l.attempt_id where a.run_id = p_run)
     + (select count(*) from ql.artifacts x join ql.run_attempts a on a.id = x.attempt_id where a.run_id = p_run)
     + (select count(*) from ql.output_streams s join ql.run_attempts a on a.id = s.attempt_id where a.run_id = p_run)
     + (select count(*) from ql.output_chunks c join ql.run_attempts a on a.id = c.attempt_id where a.run_id = p_run);
create function pg_temp.prune(p_limit integer) returns jsonb language plpgsql as $$
declare v jsonb;
begin
  set local role ql_scheduler;
  v := ql_api.prune_v1(p_limit);
  reset role;
  return v;
end $$;
create function pg_temp.ok(p_runs int, p_sessions int, p_mutations int) returns jsonb language sql
return jsonb_build_object('status', 'ok', 'runs', p_runs, 'sessions', p_sessions, 'mutations', p_mutations,
                          'bundles', 0, 'fires', 0);

-- ---------------------------------------------------------------------------------------------
-- Structure: for the scheduler role only.
select is_definer('ql_api', 'prune_v1', array['integer'], 'prune_v1 is SECURITY DEFINER');
select function_privs_are('ql_api', 'prune_v1', array['integer'], 'ql_scheduler', array['EXECUTE'],
  'the scheduler role may execute prune_v1');
select function_privs_are('ql_api', 'prune_v1', array['integer'], 'ql_runtime', array[]::text[], 'the runtime role may not');
select function_privs_are('ql_api', 'prune_v1', array['integer'], 'public', array[]::text[], 'PUBLIC may not');

-- ---------------------------------------------------------------------------------------------
-- A: succeeded 100 days ago, with a log artifact. B: running, claimed 100 days ago. C: queued 100 days ago.
-- D: succeeded 10 days ago.
select pg_temp.mk_scenario() as a_w, pg_temp.mk_scenario() as b_w, pg_temp.mk_scenario() as d_w \gset
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "pool": "nobody"}')) as c_r \gset
set local role ql_runtime;
select o as a_o, o ->> 'runId' as a_r, o ->> 'sessionId' as a_s from pg_temp.offer_at(:'a_w', 'running') o \gset
select pg_temp.upload(:'a_w', :'a_s', :'a_o', 'log', 'hello'::bytea) as a_up \gset
select ql_api.output_append_v1(:'a_w', :'a_s', 1, (:'a_o'::jsonb ->> 'projectId')::uuid, :'a_r',
  (:'a_o'::jsonb ->> 'attemptId')::uuid, (:'a_o'::jsonb ->> 'offerId')::uuid, (:'a_o'::jsonb ->> 'leaseGeneration')::bigint,
  sha256(convert_to('token-a', 'UTF8')), 'stdout', 0, 'out'::bytea) ->> 'status' as a_out \gset
select pg_temp.complete(:'a_w', :'a_s', :'a_o', 1, 0, null, jsonb_build_array((:'a_up'::jsonb -> 'receipt') - 'kind'))
  ->> 'status' as a_done \gset
select o as b_o, o ->> 'runId' as b_r from pg_temp.offer_at(:'b_w', 'running') o \gset
select o as d_o, o ->> 'runId' as d_r, o ->> 'sessionId' as d_s from pg_temp.offer_at(:'d_w', 'running') o \gset
select pg_temp.complete(:'d_w', :'d_s', :'d_o', 1, 0, null, '[]') ->> 'status' as d_done \gset
reset role;
select results_eq(format($$select status::text from ql.runs where id in (%L, %L) order by id = %L$$, :'a_r', :'d_r', :'a_r'),
  $$values ('succeeded'), ('succeeded')$$, 'A and D succeeded');
update ql.runs set ended_at_ms = ended_at_ms - 100 * 86400000::bigint, created_at_ms = created_at_ms - 100 * 86400000::bigint
 where id = :'a_r';
update ql.runs set ended_at_ms = ended_at_ms - 10 * 86400000::bigint where id = :'d_r';
update ql.runs set created_at_ms = created_at_ms - 100 * 86400000::bigint where id in (:'b_r', :'c_r');
update ql.run_attempts set claimed_at_ms = claimed_at_ms - 100 * 86400000::bigint
 where run_id in (select id from ql.runs where id = :'b_r');

-- Out of range and NULL retention: nothing changes.
select pg_temp.state() as s0 \gset
select is(pg_temp.prune(0), '{"status": "invalid", "reason": "limit"}'::jsonb, 'limit 0 is invalid');
select is(pg_temp.prune(1025), '{"status": "invalid", "reason": "limit"}'::jsonb, 'limit 1025 is invalid');
update ql.settings set run_retention_days = null;
select is(pg_temp.prune(10), pg_temp.ok(0, 0, 0), 'with run_retention_days NULL nothing is pruned');
select is(pg_temp.state(), :'s0', 'and nothing changed');
update ql.settings set run_retention_days = 90;

-- One page: A only.
select pg_temp.others(:'a_r') as others0, pg_temp.rows_of(:'a_r') as a_rows,
       (select count(*) from ql.run_events where run_id = :'a_r') as a_events \gset
select is(:a_rows::int, 6, 'A has a Run, an Attempt (its offer with it), a Lease, an artifact and an output stream and chunk');
select is(pg_temp.prune(10), pg_temp.ok(1, 0, 0), 'a page prunes the one terminal Run past retention');
select is(pg_temp.rows_of(:'a_r'), 0::bigint, 'A''s Run, Attempts, Lease, offer, artifacts and output are gone');
select is((select count(*) from ql.run_events where run_id = :'a_r'), :a_events::bigint,
  'A''s events stay until their partition is dropped');
select is(pg_temp.others(:'a_r'), :'others0',
  'no row of the live Runs B (running) and C (queued), of the younger D, no event, audit row, session or mutation changed');
select is(pg_temp.prune(10), pg_temp.ok(0, 0, 0), 'the next page finds nothing');

-- Bounded pages, the longest ended first: three Runs that failed 200, 150 and 120 days ago.
select pg_temp.mk_revision(pg_temp.mk_project()) as rev \gset
select pg_temp.mk_run(:'rev') as f1, pg_temp.mk_run(:'rev') as f2, pg_temp.mk_run(:'rev') as f3 \gset
update ql.runs set status = 'failed', ended_at_ms = ql.now_ms() - d * 86400000::bigint
  from (values (:'f1'::uuid, 200), (:'f2'::uuid, 150), (:'f3'::uuid, 120)) v (id, d) where runs.id = v.id;
select is(pg_temp.prune(2), pg_temp.ok(2, 0, 0), 'a page of 2 prunes 2 of the 3');
select results_eq(format($$select id from ql.runs where id in (%L, %L, %L)$$, :'f1', :'f2', :'f3'),
  format($$values (%L::uuid)$$, :'f3'), 'the two that ended first went first');
select is(pg_temp.prune(2), pg_temp.ok(1, 0, 0), 'the next page prunes the last one');
select is(pg_temp.prune(2), pg_temp.ok(0, 0, 0), 'then nothing is left');

-- A terminal Run whose Attempt is still live (never written so by the API) is not touched.
update ql.runs set status = 'failed', ended_at_ms = ql.now_ms() - 100 * 86400000::bigint where id = :'b_r';
select is(pg_temp.prune(10), pg_temp.ok(0, 0, 0), 'a Run with a live Attempt is never pruned');
update ql.runs set status = 'running', ended_at_ms = null where id = :'b_r';

-- Sessions: S1 replaced 100 days ago without offers goes; D's session, replaced 100 days ago, stays while D's offer
-- names it; live sessions stay.
select pg_temp.mk_worker() as sw \gset
select pg_temp.open_session(:'sw') as s1 \gset
select pg_temp.open_session(:'sw') as s2 \gset
select pg_temp.open_session(:'d_w') as d_s2 \gset
update ql.worker_sessions set ended_at_ms = ended_at_ms - 100 * 86400000::bigint where id in (:'s1', :'d_s');
select results_eq(format($$select status from ql.worker_sessions where id in (%L, %L, %L) order by id = %L, id = %L$$,
                         :'s1', :'d_s', :'s2', :'s1', :'d_s'),
  $$values ('live'), ('replaced'), ('replaced')$$, 'S1 and D''s first session were replaced');
select is(pg_temp.prune(10), pg_temp.ok(0, 1, 0), 'a page prunes the one ended session no offer names');
select results_eq(format($$select id from ql.worker_sessions where id in (%L, %L, %L) order by id = %L$$,
                         :'s1', :'d_s', :'s2', :'d_s'),
  format($$values (%L::uuid), (%L::uuid)$$, :'s2', :'d_s'), 'S1 is gone; the live one and D''s stay');

-- Mutations: one recorded 100 days ago goes, one recorded now stays.
select pg_temp.mk_subject('pruner-test') as subj \gset
insert into ql.mutations (subject_id, mutation_id, command_digest, result, created_at_ms)
values (:'subj', 'old', sha256('a'), '{}', ql.now_ms() - 100 * 86400000::bigint),
       (:'subj', 'new', sha256('b'), '{}', ql.now_ms());
select is(pg_temp.prune(10), pg_temp.ok(0, 0, 1), 'a page prunes the mutation past retention');
select results_eq(format($$select mutation_id from ql.mutations where subject_id = %L$$, :'subj'),
  $$values ('new')$$, 'the recent one stays');

-- Fire times: one 100 days old goes, one of now stays; the table's guard refuses to delete a recent one.
select pg_temp.mk_revision(pg_temp.mk_project()) as frev \gset
select t.task_id as ftask, t.project_id as fproj from ql.task_execution_revisions t where t.id = :'frev' \gset
insert into ql.schedule_fires (task_id, fire_at_ms, project_id, decided_at_ms, outcome, caught_up)
values (:'ftask', ql.now_ms() - 100 * 86400000::bigint, :'fproj', ql.now_ms() - 100 * 86400000::bigint, 'skipped_inactive', false),
       (:'ftask', ql.now_ms(), :'fproj', ql.now_ms(), 'skipped_inactive', false);
select is(pg_temp.prune(10), pg_temp.ok(0, 0, 0) || '{"fires": 1}', 'a page prunes the fire time past retention');
select is((select count(*) from ql.schedule_fires where task_id = :'ftask' and fire_at_ms > ql.now_ms() - 86400000),
  1::bigint, 'the recent one stays');
select is(pg_temp.prune(10), pg_temp.ok(0, 0, 0), 'the next page finds none');
set local role ql_owner;
select throws_ok(format($$delete from ql.schedule_fires where task_id = %L$$, :'ftask'), 'QLIMM', null,
  'even the owner cannot delete a fire time within the retention');
select throws_ok(format($$update ql.schedule_fires set caught_up = true where task_id = %L$$, :'ftask'), 'QLIMM', null,
  'nor change one');
reset role;
update ql.settings set run_retention_days = null;
insert into ql.schedule_fires (task_id, fire_at_ms, project_id, decided_at_ms, outcome, caught_up)
values (:'ftask', 1000, :'fproj', 1000, 'skipped_inactive', false);
select is(pg_temp.prune(10), pg_temp.ok(0, 0, 0), 'with NULL retention no fire time is pruned, however old');
update ql.settings set run_retention_days = 90;

-- ---------------------------------------------------------------------------------------------
-- Append-only for every role: the owner (every SECURITY DEFINER function runs as it), the scheduler, a partition.
select format('ql.run_events_p%s', to_char(now() at time zone 'UTC', 'YYYYMM')) as ev_part,
       format('ql.security_audit_p%s', to_char(now() at time zone 'UTC', 'YYYYMM')) as au_part \gset
insert into ql.security_audit (at_ms, route, decision, reason, request_id) values (ql.now_ms(), 'test', 'allow', 'ok', 'r1');
set local role ql_owner;
select throws_ok($$delete from ql.run_events$$, 'QLIMM', null, 'the owner cannot delete an event');
select throws_ok(format('delete from %s', :'ev_part'), 'QLIMM', null, 'nor from its partition');
select throws_ok(format('update %s set type = %L', :'ev_part', 'run.forged'), 'QLIMM', null, 'nor rewrite one there');
select throws_ok(format('truncate %s', :'ev_part'), 'QLIMM', null, 'nor truncate the partition');
select throws_ok(format('delete from %s', :'au_part'), 'QLIMM', null, 'nor delete an audit row from its partition');
select throws_ok(format('truncate %s', :'au_part'), 'QLIMM', null, 'nor truncate an audit partition');
reset role;
set local role ql_scheduler;
select throws_ok($$delete from ql.run_events$$, '42501', null, 'the scheduler role has no table privilege');
reset role;

select * from finish();
rollback;
