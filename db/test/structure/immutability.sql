-- Structure: task revisions are immutable; run events and the audit are append-only; events are contiguous per Run.
begin;
\ir ../fixtures.psql
select plan(10);

select pg_temp.mk_project() as project \gset
select pg_temp.mk_revision(:'project', '{"argv": ["true"], "timeoutMs": 1000}') as rev \gset
select pg_temp.mk_run(:'rev') as run \gset

select throws_ok($$update ql.task_execution_revisions set plan_json = '{"argv": ["false"]}'$$, 'QLIMM', null,
                 'a task revision cannot be updated');
select throws_ok($$delete from ql.task_execution_revisions$$, 'QLIMM', null, 'a task revision cannot be deleted');
set constraints all immediate;
select throws_ok($$truncate ql.task_execution_revisions cascade$$, 'QLIMM', null, 'task revisions cannot be truncated');
select throws_ok($$update ql.run_events set type = 'run.forged'$$, 'QLIMM', null, 'a run event cannot be rewritten');
select throws_ok($$delete from ql.run_events$$, 'QLIMM', null, 'a run event cannot be deleted');
insert into ql.security_audit (at_ms, route, decision, reason, request_id) values (ql.now_ms(), 'test', 'allow', 'ok', 'r1');
select throws_ok($$update ql.security_audit set decision = 'deny'$$, 'QLIMM', null, 'an audit row cannot be rewritten');
select throws_ok($$delete from ql.security_audit$$, 'QLIMM', null, 'an audit row cannot be deleted');

select ql.run_event(:'run', null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), 'note-1');
select ql.run_event(:'run', null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), 'note-2');
select results_eq(format($$select sequence from ql.run_events where run_id = %L order by sequence$$, :'run'),
                  $$values (1::bigint), (2::bigint), (3::bigint)$$,
                  'ql.run_event numbers a Run''s events 1, 2, 3 with no gap');
select results_eq(format($$select version, event_sequence from ql.runs where id = %L$$, :'run'),
                  $$values (4::bigint, 3::bigint)$$, 'each event bumps the Run''s version and event sequence together');
select throws_ok(format($$select ql.run_event(%L, null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), 'note-1')$$, :'run'),
                 '23505', null, 'a duplicate dedupe key is refused');

select * from finish();
rollback;
