-- Tests ql.is_terminal: exactly succeeded, failed, cancelled and timed_out are terminal, of Runs and Attempts alike;
-- inlined, so the scheduler's overlap check still reads the partial index whose predicate spells them out.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(6);

select volatility_is('ql', 'is_terminal', array['text'], 'immutable', 'immutable: the planner inlines and folds it');
select is(array(select s from unnest(array[
                  'created', 'queued', 'waiting_approval', 'retry_wait', 'lost', 'running', 'claimed', 'starting',
                  'abandoned', 'succeeded', 'failed', 'cancelled', 'timed_out']) s
              where ql.is_terminal(s) order by 1),
          array['cancelled', 'failed', 'succeeded', 'timed_out'],
          'of every Run and Attempt status, the four terminal ones');
select is(ql.is_terminal(null), null, 'NULL for NULL');
select ok(ql.is_terminal('timed_out'::ql.run_status) and ql.is_terminal('failed'::ql.attempt_status),
          'takes both status domains');
select is(ql.is_terminal('live'), false, 'any other text is not terminal');

create function pg_temp.explain(p_sql text) returns setof text language plpgsql as $$
begin
  return query execute 'explain (costs off) ' || p_sql;
end $$;

select pg_temp.mk_revision(pg_temp.mk_project()) as rev \gset
select pg_temp.mk_run(:'rev') as run \gset
set local enable_seqscan = off;
select matches(
  (select string_agg(line, E'\n') from pg_temp.explain(format(
     $$select r.id from ql.runs r where r.task_id = %L and not ql.is_terminal(r.status) limit 1$$,
     (select task_id from ql.runs where id = :'run'))) line),
  'runs_task_live_idx',
  'not ql.is_terminal(status) matches the predicate of ql.runs_task_live_idx (the overlap check''s index)');

select * from finish();
rollback;
