-- Tests ql_api.run_list_v1: a Project's Runs newest first by (created_at_ms, id), ties included; keyset pages
-- whose walk is the full order, stable when Runs are created between pages; filters by task, status and the
-- creation range [since, until) alone and together; each row's fields from the stored Run, its task and its
-- Attempts; another Project's Runs never appear; every refusal is a typed invalid that changes nothing; it
-- writes nothing; only the runtime role may call it.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(54);

-- The listing as the shell reads it (as ql_runtime; the caller resets the role after).
create function pg_temp.list(p_project uuid, p_task uuid default null, p_status text default null,
                             p_since bigint default null, p_until bigint default null, p_limit int default null,
                             p_cursor text default null) returns jsonb language sql
return ql_api.run_list_v1(p_project, p_task, p_status, p_since, p_until, p_limit, p_cursor);

create function pg_temp.ids(p_page jsonb) returns uuid[] language sql
return array(select (e ->> 'runId')::uuid from jsonb_array_elements(p_page -> 'runs') e);

-- Every page of a listing, following nextCursor: the Run ids in the order the pages gave them.
create function pg_temp.walk(p_project uuid, p_limit int, p_task uuid default null, p_status text default null,
                             p_since bigint default null, p_until bigint default null) returns uuid[]
language plpgsql as $$
declare
  v_page jsonb := pg_temp.list(p_project, p_task, p_status, p_since, p_until, p_limit);
  v_ids uuid[] := pg_temp.ids(v_page);
begin
  while v_page ->> 'nextCursor' is not null loop
    v_page := pg_temp.list(p_project, p_task, p_status, p_since, p_until, p_limit, v_page ->> 'nextCursor');
    v_ids := v_ids || pg_temp.ids(v_page);
  end loop;
  return v_ids;
end $$;

-- The expected order, straight from the table.
create function pg_temp.expected(p_project uuid, p_where text default 'true') returns uuid[] language plpgsql as $$
declare
  v uuid[];
begin
  execute format('select array(select r.id from ql.runs r where r.project_id = %L and %s
                  order by r.created_at_ms desc, r.id desc)', p_project, p_where) into v;
  return v;
end $$;

-- A Run of a revision created at p_ms with status p_status (written as the deployer would).
create function pg_temp.run_at(p_revision uuid, p_ms bigint, p_status text default 'queued') returns uuid
language plpgsql as $$
declare
  v_run uuid := pg_temp.mk_run(p_revision);
begin
  update ql.runs set created_at_ms = p_ms, status = p_status,
                     ended_at_ms = case when p_status in ('succeeded', 'failed', 'cancelled', 'timed_out') then p_ms + 7 end
   where id = v_run;
  return v_run;
end $$;

-- ---------------------------------------------------------------------------------------------
-- Structure.
select has_function('ql_api', 'run_list_v1', array['uuid', 'uuid', 'text', 'bigint', 'bigint', 'integer', 'text'],
  'run_list_v1(project, task, status, since, until, limit, cursor) exists');
select is_definer('ql_api', 'run_list_v1', array['uuid', 'uuid', 'text', 'bigint', 'bigint', 'integer', 'text'],
  'run_list_v1 runs as its owner (SECURITY DEFINER)');
select volatility_is('ql_api', 'run_list_v1', array['uuid', 'uuid', 'text', 'bigint', 'bigint', 'integer', 'text'],
  'stable', 'run_list_v1 is STABLE: one snapshot, no writes');
select is((select p.proconfig from pg_catalog.pg_proc p
            where p.oid = 'ql_api.run_list_v1(uuid, uuid, text, bigint, bigint, integer, text)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'run_list_v1 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'run_list_v1', array['uuid', 'uuid', 'text', 'bigint', 'bigint', 'integer', 'text'],
  'ql_runtime', array['EXECUTE'], 'the runtime role (the shell) may list Runs');
select function_privs_are('ql_api', 'run_list_v1', array['uuid', 'uuid', 'text', 'bigint', 'bigint', 'integer', 'text'],
  'public', array[]::text[], 'PUBLIC may not list Runs');

-- ---------------------------------------------------------------------------------------------
-- Setup. Project P: task A and task B, 14 Runs created at base + 1000 * (i / 2) (two Runs per millisecond, so
-- the id breaks ties), statuses cycling queued, succeeded, failed, cancelled. Project Q: 3 Runs created at the
-- same times, one of them failed.
select pg_temp.mk_project('rl-p') as p, pg_temp.mk_project('rl-q') as q \gset
select pg_temp.mk_revision(:'p') as rev_a, pg_temp.mk_revision(:'p') as rev_b, pg_temp.mk_revision(:'q') as rev_q \gset
select task_id as task_a from ql.task_execution_revisions where id = :'rev_a' \gset
select task_id as task_b from ql.task_execution_revisions where id = :'rev_b' \gset
select task_id as task_q from ql.task_execution_revisions where id = :'rev_q' \gset
select name as task_b_name from ql.tasks where id = :'task_b' \gset
select ql.now_ms() - 1000000 as base \gset
select count(pg_temp.run_at(case when i % 2 = 0 then :'rev_a'::uuid else :'rev_b'::uuid end, :base + 1000 * (i / 2),
                            (array['queued', 'succeeded', 'failed', 'cancelled'])[1 + i % 4])) as n
  from generate_series(0, 13) i \gset
select count(pg_temp.run_at(:'rev_q', :base + 1000 * i, case when i = 1 then 'failed' else 'queued' end)) as nq
  from generate_series(0, 2) i \gset
select pg_temp.state() as before \gset

-- ---------------------------------------------------------------------------------------------
-- 1. Order and pages.
set local role ql_runtime;
select pg_temp.list(:'p') as all_p \gset
select pg_temp.walk(:'p', 3) as walk3, pg_temp.walk(:'p', 1) as walk1, pg_temp.walk(:'p', 100) as walk100 \gset
select pg_temp.list(:'p', p_limit => 14) as exact \gset
select pg_temp.list(:'p', p_limit => 5) as page1 \gset
reset role;
select is(array(select k from jsonb_object_keys(:'all_p'::jsonb) k order by k), array['nextCursor', 'runs', 'status'],
  'listed answers exactly status, runs and nextCursor');
select is(:'all_p'::jsonb ->> 'status', 'listed', 'a listing is status listed');
select is(pg_temp.ids(:'all_p'), pg_temp.expected(:'p'),
  'the Runs come newest first by created_at_ms, ties by id descending (the default page holds all 14)');
select is(:'all_p'::jsonb -> 'nextCursor', 'null'::jsonb, 'a listing that fits one page has nextCursor null');
select is(:'walk3'::uuid[], pg_temp.expected(:'p'), 'pages of 3 (4, 1 on the last), followed by cursor, are the full order');
select is(:'walk1'::uuid[], pg_temp.expected(:'p'), 'pages of 1 through the ties are the full order too: nothing skipped or repeated');
select is(:'walk100'::uuid[], pg_temp.expected(:'p'), 'a page of the maximum 100 holds everything');
select is(:'exact'::jsonb -> 'nextCursor', 'null'::jsonb,
  'a page exactly as long as what is left has no nextCursor (no empty last page)');
select is(jsonb_array_length(:'page1'::jsonb -> 'runs'), 5, 'a page holds at most its limit');
select ok(:'page1'::jsonb ->> 'nextCursor' ~ '^[A-Za-z0-9_-]{32}$', 'nextCursor is 32 characters of base64url');
select is(:'page1'::jsonb ->> 'nextCursor',
  (select translate(encode(int8send(r.created_at_ms) || uuid_send(r.id), 'base64'), '+/', '-_')
     from ql.runs r where r.id = (pg_temp.ids(:'page1'::jsonb))[5]),
  'nextCursor encodes the last row''s (created_at_ms, id)');
select is(pg_temp.state(), :'before', 'listing and paging wrote nothing');

-- 2. Stable under inserts: Runs created between two pages (newer than all, as every new Run is) do not move the
-- next page, and a fresh walk shows them first.
set local role ql_runtime;
select pg_temp.list(:'p', p_limit => 5, p_cursor => :'page1'::jsonb ->> 'nextCursor') as page2_before \gset
reset role;
select pg_temp.mk_run(:'rev_a') as new1, pg_temp.mk_run(:'rev_b') as new2 \gset
set local role ql_runtime;
select pg_temp.list(:'p', p_limit => 5, p_cursor => :'page1'::jsonb ->> 'nextCursor') as page2_after \gset
select pg_temp.walk(:'p', 4) as walk_after \gset
reset role;
select is(:'page2_after'::jsonb, :'page2_before'::jsonb, 'the second page is the same after two Runs were created');
select is(pg_temp.ids(:'page1'::jsonb) || pg_temp.ids(:'page2_after'::jsonb), (pg_temp.expected(:'p'))[3:12],
  'the two pages are the 10 Runs after the two new ones, in order');
select is(:'walk_after'::uuid[], pg_temp.expected(:'p'), 'a new walk lists the new Runs first, then the rest');
select ok(:'new1'::uuid = any(:'walk_after'::uuid[]) and :'new2'::uuid = any(:'walk_after'::uuid[]),
  'the new Runs are listed');

-- 3. Filters, alone and together, each walked in small pages.
set local role ql_runtime;
select pg_temp.walk(:'p', 2, :'task_a') as by_task, pg_temp.walk(:'p', 2, p_status => 'failed') as by_status,
       pg_temp.walk(:'p', 2, :'task_b', 'cancelled') as by_both,
       pg_temp.walk(:'p', 2, p_since => :base + 2000, p_until => :base + 5000) as by_range,
       pg_temp.walk(:'p', 2, :'task_a', 'queued', :base + 1000, :base + 6000) as by_all,
       pg_temp.walk(:'p', 2, p_since => :base + 6000) as since_only, pg_temp.walk(:'p', 2, p_until => :base + 1000) as until_only,
       pg_temp.walk(:'p', 2, p_status => 'running') as none_running, pg_temp.walk(:'p', 2, :'task_q') as foreign_task \gset
reset role;
select is(:'by_task'::uuid[], pg_temp.expected(:'p', format('r.task_id = %L', :'task_a')), 'task filter: task A''s Runs, in order');
select is(:'by_status'::uuid[], pg_temp.expected(:'p', $$r.status = 'failed'$$), 'status filter: the failed Runs, in order');
select is(:'by_both'::uuid[], pg_temp.expected(:'p', format($$r.task_id = %L and r.status = 'cancelled'$$, :'task_b')),
  'task and status: task B''s cancelled Runs');
select is(:'by_range'::uuid[], pg_temp.expected(:'p', format('r.created_at_ms >= %s and r.created_at_ms < %s', :base + 2000, :base + 5000)),
  'range: since inclusive, until exclusive');
select is(cardinality(:'by_range'::uuid[]), 6, 'the range [base+2 s, base+5 s) holds the 6 Runs of 3 milliseconds');
select is(:'by_all'::uuid[],
  pg_temp.expected(:'p', format($$r.task_id = %L and r.status = 'queued' and r.created_at_ms >= %s and r.created_at_ms < %s$$,
                                :'task_a', :base + 1000, :base + 6000)),
  'task, status and range together');
select ok(cardinality(:'by_all'::uuid[]) between 1 and 4, 'the combined filter selects some Runs, not all');
select is(:'since_only'::uuid[], pg_temp.expected(:'p', format('r.created_at_ms >= %s', :base + 6000)),
  'since alone: the Runs created at or after it (the newest included)');
select is(:'until_only'::uuid[], pg_temp.expected(:'p', format('r.created_at_ms < %s', :base + 1000)), 'until alone');
select is(:'none_running'::uuid[], '{}'::uuid[], 'a status no Run has lists nothing');
select is(:'foreign_task'::uuid[], '{}'::uuid[], 'another Project''s task id lists nothing in this Project');

-- 4. Another Project's Runs never appear.
set local role ql_runtime;
select pg_temp.walk(:'q', 1) as walk_q, pg_temp.list(gen_random_uuid()) as nobody \gset
reset role;
select is(:'walk_q'::uuid[], pg_temp.expected(:'q'), 'Project Q lists exactly its own 3 Runs');
select ok(not (:'walk_q'::uuid[] && pg_temp.expected(:'p')), 'no Run of P appears in Q''s listing');
select is(:'nobody'::jsonb, '{"status": "listed", "runs": [], "nextCursor": null}'::jsonb,
  'a Project without Runs (or an unknown one) lists nothing');
select ok(not exists (select 1 from unnest(:'walk3'::uuid[] || :'walk_after'::uuid[] || :'by_status'::uuid[]) u(id)
                       join ql.runs r on r.id = u.id where r.project_id <> :'p'),
  'no listing of P holds a Run of another Project');

-- 5. The row: the stored Run, its task's name, its Attempts. A Run whose first Attempt failed (exit 3) and whose
-- retry succeeded through a real Worker; one cancelled; one not yet started.
select pg_temp.mk_revision(:'p', '{"argv": ["true"], "maxAttempts": 2, "pool": "rl-pool"}') as rev_w \gset
select pg_temp.mk_run(:'rev_w') as rw \gset
select task_id as task_w from ql.task_execution_revisions where id = :'rev_w' \gset
select pg_temp.mk_worker('rl-pool') as w \gset
set local role ql_runtime;
select pg_temp.offer_at(:'w', 'running') as o1 \gset
select pg_temp.complete(:'w', (:'o1'::jsonb ->> 'sessionId')::uuid, :'o1', 1, 3) ->> 'runStatus' as first_end \gset
select pg_temp.pull(:'w', (:'o1'::jsonb ->> 'sessionId')::uuid) || jsonb_build_object('sessionId', :'o1'::jsonb ->> 'sessionId') as o2 \gset
select pg_temp.activate('starting', :'w', (:'o2'::jsonb ->> 'sessionId')::uuid, :'o2') ->> 'status' as s2 \gset
select pg_temp.activate('running', :'w', (:'o2'::jsonb ->> 'sessionId')::uuid, :'o2') ->> 'status' as r2 \gset
select pg_temp.complete(:'w', (:'o2'::jsonb ->> 'sessionId')::uuid, :'o2', 1, 0) ->> 'runStatus' as second_end \gset
select pg_temp.list(:'p', :'task_b', 'cancelled', p_limit => 1) -> 'runs' -> 0 as row_cancelled \gset
select pg_temp.list(:'p', :'task_w') -> 'runs' -> 0 as row_w \gset
reset role;
select is(array[:'first_end', :'s2', :'r2', :'second_end'], array['retry_wait', 'applied', 'applied', 'succeeded'],
  'setup: the first Attempt failed into retry_wait, the retry was offered at once and succeeded');
select is(array(select k from jsonb_object_keys(:'row_w'::jsonb) k order by k),
  array['attemptCount', 'cancelReason', 'createdAtMs', 'endedAtMs', 'exitCode', 'runId', 'startedAtMs', 'status',
        'taskId', 'taskName'],
  'a row has exactly the documented keys');
select is(:'row_w'::jsonb,
  (select jsonb_build_object('runId', r.id, 'taskId', r.task_id, 'taskName', t.name, 'status', 'succeeded',
            'attemptCount', 2, 'createdAtMs', r.created_at_ms,
            'startedAtMs', (select a.started_at_ms from ql.run_attempts a where a.run_id = r.id and a.attempt_no = 1),
            'endedAtMs', r.ended_at_ms, 'exitCode', 0, 'cancelReason', null)
     from ql.runs r join ql.tasks t on t.id = r.task_id where r.id = :'rw'),
  'the retried Run: succeeded after 2 Attempts, started when the FIRST Attempt started, the LAST Attempt''s exit code 0');
select ok((:'row_w'::jsonb ->> 'startedAtMs')::bigint < (select a.started_at_ms from ql.run_attempts a where a.run_id = :'rw' and a.attempt_no = 2),
  'startedAtMs is the first start, earlier than the retry''s');
select is(array[:'row_cancelled'::jsonb ->> 'status', :'row_cancelled'::jsonb ->> 'taskName',
                :'row_cancelled'::jsonb ->> 'startedAtMs', :'row_cancelled'::jsonb ->> 'exitCode'],
  array['cancelled', :'task_b_name', null, null],
  'a Run that never started: its task''s name, no start time, no exit code');
update ql.runs set cancel_requested_at_ms = ended_at_ms - 1, cancel_reason = 'user'
 where id = (:'row_cancelled'::jsonb ->> 'runId')::uuid;
set local role ql_runtime;
select pg_temp.list(:'p', :'task_b', 'cancelled', p_limit => 1) -> 'runs' -> 0 as row_cancelled2 \gset
reset role;
select is(:'row_cancelled2'::jsonb ->> 'cancelReason', 'user', 'a Run with a cancel intent shows its reason');

-- 6. Refusals: typed, and nothing changes.
select pg_temp.state() as before_refusals \gset
set local role ql_runtime;
select is(pg_temp.list(null), '{"status": "invalid", "reason": "project_id"}', 'a NULL project is invalid project_id');
select is(pg_temp.list(:'p', p_limit => 0), '{"status": "invalid", "reason": "limit"}', 'limit 0 is invalid limit');
select is(pg_temp.list(:'p', p_limit => 101), '{"status": "invalid", "reason": "limit"}', 'limit 101 (over the cap) is invalid limit');
select is(pg_temp.list(:'p', p_status => 'finished'), '{"status": "invalid", "reason": "status"}', 'an unknown status is invalid status');
select is(pg_temp.list(:'p', p_status => 'Queued'), '{"status": "invalid", "reason": "status"}', 'statuses are case-sensitive');
select is(pg_temp.list(:'p', p_since => -1), '{"status": "invalid", "reason": "time_range"}', 'a negative since is invalid time_range');
select is(pg_temp.list(:'p', p_until => 9007199254740992), '{"status": "invalid", "reason": "time_range"}',
  'an until past 2^53-1 is invalid time_range');
select is(pg_temp.list(:'p', p_since => :base, p_until => :base), '{"status": "invalid", "reason": "time_range"}',
  'since equal to until (an empty range) is invalid time_range');
select is(array[pg_temp.list(:'p', p_cursor => 'short'), pg_temp.list(:'p', p_cursor => repeat('A', 33)),
                pg_temp.list(:'p', p_cursor => repeat('A', 31) || '='), pg_temp.list(:'p', p_cursor => repeat('A', 31) || '+'),
                pg_temp.list(:'p', p_cursor => '_' || repeat('A', 31))],
  array_fill('{"status": "invalid", "reason": "cursor"}'::jsonb, array[5]),
  'a cursor that is not 32 base64url characters, or names a negative time, is invalid cursor');
reset role;
select is(pg_temp.state(), :'before_refusals', 'the refusals changed nothing');

-- 7. Only the runtime role.
set local role ql_scheduler;
select throws_ok(format($$select ql_api.run_list_v1(%L)$$, :'p'), '42501', 'permission denied for function run_list_v1',
  'the scheduler role listing Runs is refused: 42501');
reset role;

select * from finish();
rollback;
