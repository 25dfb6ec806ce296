-- Tests ql.retry_decision: the retry authority — retry_wait at now + retryBackoffMs while fewer than maxAttempts (default 1) non-abandoned Attempts exist, else failed (docs/architecture.md §4 item 9).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(25);

-- The Run row p_run as the retry authority would see it after p_count Attempts.
create function pg_temp.run_after(p_run uuid, p_count int) returns ql.runs language sql
return (select jsonb_populate_record(null::ql.runs, to_jsonb(r) || jsonb_build_object('attempt_count', p_count))
          from ql.runs r where r.id = p_run);

-- The decision as text: (status,retry_at_ms), after p_count failed Attempts (and p_abandoned abandoned claims).
create function pg_temp.decide(p_run uuid, p_count int, p_now bigint, p_abandoned int default 0) returns text
language plpgsql as $$
declare
  v_worker uuid := pg_temp.mk_worker();
  v_result text;
begin
  delete from ql.run_attempts where run_id = p_run;
  insert into ql.run_attempts (run_id, attempt_no, status, worker_id, worker_generation, offer_id, claimed_at_ms, ended_at_ms,
                               session_id, offer_expires_at_ms)
  select p_run, n, case when n <= p_abandoned then 'abandoned' else 'failed' end, v_worker, 1, gen_random_uuid(), 1, 2,
         gen_random_uuid(), 1
    from generate_series(1, p_count + p_abandoned) n;
  select (d.status, d.retry_at_ms)::text into v_result
    from ql.retry_decision(pg_temp.run_after(p_run, p_count + p_abandoned), p_now) d;
  return v_result;
end $$;

\set now 1700000000000

select pg_temp.mk_project() as p \gset
select pg_temp.mk_run(pg_temp.mk_revision(:'p')) as r_default,
       pg_temp.mk_run(pg_temp.mk_revision(:'p', '{"argv": ["true"], "maxAttempts": 3, "retryBackoffMs": 5000}')) as r_three,
       pg_temp.mk_run(pg_temp.mk_revision(:'p', '{"argv": ["true"], "maxAttempts": 2}')) as r_nobackoff,
       pg_temp.mk_run(pg_temp.mk_revision(:'p', '{"argv": ["true"], "maxAttempts": 100, "retryBackoffMs": 2147483647}')) as r_max
\gset

-- ---------------------------------------------------------------------------------------------
-- Structure: a private helper, not callable from outside the schema.
select has_function('ql', 'retry_decision', array['ql.runs', 'bigint'],
  'ql.retry_decision(run, now_ms) exists');
select isnt_definer('ql', 'retry_decision', array['ql.runs', 'bigint'],
  'the helper runs with its caller''s rights (the SECURITY DEFINER page functions call it)');
select volatility_is('ql', 'retry_decision', array['ql.runs', 'bigint'], 'stable',
  'the decision is a pure read: STABLE');
select function_privs_are('ql', 'retry_decision', array['ql.runs', 'bigint'],
  'ql_runtime', array[]::text[], 'the runtime role may not execute the retry authority');
select function_privs_are('ql', 'retry_decision', array['ql.runs', 'bigint'],
  'ql_scheduler', array[]::text[], 'the scheduler role may not execute the helper directly (only through the page functions)');
select function_privs_are('ql', 'retry_decision', array['ql.runs', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute the retry authority');
select pg_temp.run_after(:'r_default', 1)::text as run_row \gset
set local role ql_runtime;
select throws_ok(format($$select * from ql.retry_decision(%L::text::ql.runs, 1)$$, :'run_row'),
  '42501', 'permission denied for schema ql', 'the runtime role cannot ask the retry authority');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Defaults: maxAttempts 1 (no retry at all), retryBackoffMs 0.
select is(pg_temp.decide(:'r_default', 1, :now), '(failed,)',
  'without maxAttempts (default 1) the first failed Attempt fails the Run, with no retry time');
select is(pg_temp.decide(:'r_default', 0, :now), format('(retry_wait,%s)', :now),
  'default backoff 0: a Run with no Attempt spent yet may retry at exactly now');
select is(pg_temp.decide(:'r_nobackoff', 1, :now), format('(retry_wait,%s)', :now),
  'maxAttempts 2 without retryBackoffMs retries at exactly now (backoff default 0)');
select is(pg_temp.decide(:'r_nobackoff', 2, :now), '(failed,)',
  'maxAttempts 2: after the second Attempt the Run fails');

-- ---------------------------------------------------------------------------------------------
-- maxAttempts 3, retryBackoffMs 5000: exact retry_at = now + backoff, then failed once spent.
select is(pg_temp.decide(:'r_three', 1, :now), format('(retry_wait,%s)', :now + 5000),
  'after Attempt 1 of 3: retry_wait with retry_at exactly now + 5000');
select is(pg_temp.decide(:'r_three', 2, :now), format('(retry_wait,%s)', :now + 5000),
  'after Attempt 2 of 3: retry_wait with retry_at exactly now + 5000');
select is(pg_temp.decide(:'r_three', 3, :now), '(failed,)',
  'after Attempt 3 of 3 maxAttempts is spent: failed, no retry time');
select is(pg_temp.decide(:'r_three', 4, :now), '(failed,)',
  'more Attempts than allowed (claims abandoned on the way) still fail, never retry');
select is(pg_temp.decide(:'r_three', 1, 0), '(retry_wait,5000)',
  'retry_at is computed from the given time, not from the clock');
select is(pg_temp.decide(:'r_three', 1, :now + 1), format('(retry_wait,%s)', :now + 5001),
  'a millisecond later, retry_at is a millisecond later');

-- The largest plan values stay exact (bigint arithmetic, no overflow).
select is(pg_temp.decide(:'r_max', 99, :now), format('(retry_wait,%s)', :now + 2147483647),
  'maxAttempts 100 with the largest backoff: Attempt 99 retries at now + 2147483647 exactly');
select is(pg_temp.decide(:'r_max', 100, :now), '(failed,)',
  'maxAttempts 100: after Attempt 100 the Run fails');

-- ---------------------------------------------------------------------------------------------
-- The pinned revision decides, not the task's current one.
select t.id as task from ql.tasks t join ql.task_execution_revisions v on v.task_id = t.id
 join ql.runs r on r.task_revision_id = v.id where r.id = :'r_default' \gset
insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)
values (:'task', :'p', '{"argv": ["true"], "maxAttempts": 9, "retryBackoffMs": 1}', '00000000-0000-4000-8000-000000000001')
returning id as newer_rev \gset
update ql.tasks set current_revision_id = :'newer_rev' where id = :'task';
select is(pg_temp.decide(:'r_default', 1, :now), '(failed,)',
  'a newer task revision (maxAttempts 9) does not change the retry budget of a Run pinned to the old one');

-- An intent is the callers' decision, not this function's.
select ql.run_cancel_intent(:'r_three', 'user', 'user', null, ql.now_ms()) as seq \gset
select is(pg_temp.decide(:'r_three', 1, :now), format('(retry_wait,%s)', :now + 5000),
  'retry_decision does not read the cancel intent: its callers decide first that an intent wins');

-- A real Run row (attempt_count 0 as enqueued, no Attempt), without any rewriting.
delete from ql.run_attempts where run_id = :'r_default';
select is((select (d.status, d.retry_at_ms)::text from ql.runs r, ql.retry_decision(r, :now) d where r.id = :'r_default'),
  format('(retry_wait,%s)', :now), 'called with a stored Run row (attempt_count 0) it answers one decision');

-- ---------------------------------------------------------------------------------------------
-- Pure read.
select pg_temp.state() as before \gset
select count(*) as decisions from ql.runs r, generate_series(0, 5) n,
       ql.retry_decision(pg_temp.run_after(r.id, n), :now) d \gset
select is(pg_temp.state(), :'before', 'deciding writes nothing');
select is((select count(*) from ql.retry_decision(pg_temp.run_after(:'r_three', 1), :now)), 1::bigint,
  'exactly one decision per Run');

select is(pg_temp.decide(:'r_nobackoff', 1, :now, 3), format('(retry_wait,%s)', :now),
  'abandoned claims spend no retry: 3 abandoned + 1 failed of maxAttempts 2 still retries');

select * from finish();
rollback;
