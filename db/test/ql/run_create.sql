-- Tests ql.run_create: a queued Run pinned to the revision, in its plan's pool, with one run.queued event whose payload
-- is taskId and taskRevisionId beside the caller's keys.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(4);

select pg_temp.mk_revision(pg_temp.mk_project(), '{"argv": ["true"], "pool": "edge"}') as rev,
       gen_random_uuid() as run, ql.now_ms() as now \gset
select ql.run_create(:'run', (select r from ql.task_execution_revisions r where r.id = :'rev'), 'system', null,
                     '{"note": 1}', :now);

select results_eq(format($$select status::text, pool, task_revision_id, queued_at_ms::bigint, created_at_ms::bigint, version,
                                  event_sequence from ql.runs where id = %L$$, :'run'),
                  format($$values ('queued', 'edge', %L::uuid, %s::bigint, %s::bigint, 2::bigint, 1::bigint)$$,
                         :'rev', :now, :now),
                  'a queued Run of the revision, in its plan''s pool, at the given time, with one event');
select results_eq(format($$select type, actor_kind::text, payload, dedupe_key from ql.run_events where run_id = %L$$,
                         :'run'),
                  format($$values ('run.queued', 'system', jsonb_build_object('taskId', (select task_id from
                             ql.task_execution_revisions where id = %L), 'taskRevisionId', %L::uuid, 'note', 1),
                             'run.queued:' || %L)$$, :'rev', :'rev', :'run'),
                  'its run.queued event: taskId, taskRevisionId and the caller''s payload');
select throws_ok(format($$select ql.run_create(%L, (select r from ql.task_execution_revisions r where r.id = %L),
                                               'system', null, '{}', %s)$$, :'run', :'rev', :now),
                 '23505', null, 'a Run id that exists is refused');
select ok(not has_function_privilege('ql_runtime', 'ql.run_create(uuid, ql.task_execution_revisions, ql.actor_kind, uuid, jsonb, bigint)', 'execute'),
          'private: the runtime role cannot call it');

select * from finish();
rollback;
