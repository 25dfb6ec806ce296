-- Tests ql.run_requeue: the one move of a due retry_wait Run to queued — one run.requeued event by the given actor,
-- queued_at_ms = now, retry_at_ms cleared, written once (dedupe key); any other Run (not retry_wait, not yet due,
-- with a cancel intent) raises QLBUG and changes nothing; private to the owner.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(10);

create function pg_temp.row_of(p_run uuid) returns ql.runs language sql
return (select r from ql.runs r where r.id = p_run);

select pg_temp.mk_revision(pg_temp.mk_project()) as rev \gset
select pg_temp.mk_run(:'rev') as r, pg_temp.mk_run(:'rev') as r_intent, pg_temp.mk_run(:'rev') as r_queued,
       ql.now_ms() as now \gset
update ql.runs set status = 'retry_wait', retry_at_ms = :now - 10, attempt_count = 1 where id in (:'r', :'r_intent');
update ql.runs set retry_at_ms = :now + 60000 where id = :'r_queued';
select ql.run_cancel_intent(:'r_intent', 'user', 'user', null, :now) as intent_seq \gset
select r.version as version, r.event_sequence as seq from ql.runs r where r.id = :'r' \gset

select pg_temp.state() as before \gset
select throws_ok(format($$select ql.run_requeue(pg_temp.row_of(%L), 'system', %s)$$, :'r_queued', :now), 'QLBUG', null,
  'a queued Run is no retry to requeue: QLBUG');
select throws_ok(format($$select ql.run_requeue(pg_temp.row_of(%L), 'system', %s)$$, :'r', :now - 11), 'QLBUG', null,
  'a retry not yet due: QLBUG');
select throws_ok(format($$select ql.run_requeue(pg_temp.row_of(%L), 'reconciler', %s)$$, :'r_intent', :now), 'QLBUG', null,
  'a due retry with a cancel intent: QLBUG (an intent always wins over a retry)');
select is(pg_temp.state(), :'before', 'the refused moves changed nothing');

select pg_temp.row_of(:'r')::text as r_row \gset
select ql.run_requeue(pg_temp.row_of(:'r'), 'system', :now) as requeued \gset
select results_eq(format($$select r.status::text, r.version, r.queued_at_ms::bigint, r.retry_at_ms::bigint from ql.runs r where r.id = %L$$, :'r'),
  format($$values ('queued'::text, %s::bigint, %s::bigint, null::bigint)$$, :version + 1, :now),
  'the Run is queued at the given time, its retry time cleared, one version more');
select results_eq(format($$select e.sequence, e.type, e.actor_kind::text, e.payload, e.occurred_at_ms::bigint, e.dedupe_key
                            from ql.run_events e where e.run_id = %L and e.sequence > %s$$, :'r', :seq),
  format($$values (%s::bigint, 'run.requeued'::text, 'system'::text, '{"attemptCount": 1}'::jsonb, %s::bigint, %L::text)$$,
         :seq + 1, :now, 'run.requeued:' || :'r' || ':1'),
  'one run.requeued event by the given actor, with the Attempts spent and a dedupe key of the Run and that count');
select ok(pg_temp.stream_ok(:'r'), 'the stream stays contiguous with the version');
select throws_ok(format($$select ql.run_requeue(%L::ql.runs, 'reconciler', %s)$$, :'r_row', :now), '23505', null,
  'a second move from the same retry (a racing caller''s stale row) is a duplicate event: written once');

select is(has_function_privilege('ql_runtime', 'ql.run_requeue(ql.runs, ql.actor_kind, bigint)', 'execute'), false,
  'the runtime role may not call it');
select is(has_function_privilege('public', 'ql.run_requeue(ql.runs, ql.actor_kind, bigint)', 'execute'), false,
  'PUBLIC may not call it');

select * from finish();
rollback;
