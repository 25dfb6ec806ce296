-- pgTAP: ql.run_statuses, the statuses of a Project's or a task's Runs.
begin;
select plan(5);

select ql_api.project_create_v1('statuses-p') ->> 'projectId' as p \gset
select ql_api.project_create_v1('statuses-q') ->> 'projectId' as q \gset
select ql_api.task_create_v1(:'p', 'one', '{"argv": ["true"]}') ->> 'taskId' as t1 \gset
select ql_api.task_create_v1(:'p', 'two', '{"argv": ["true"]}') ->> 'taskId' as t2 \gset
select ql_api.task_create_v1(:'q', 'other', '{"argv": ["true"]}') ->> 'taskId' as t3 \gset
select is(ql.run_statuses(:'p'), '{}'::ql.run_status[], 'a Project without Runs has no statuses');

insert into ql.runs (project_id, task_id, task_revision_id, pool, status, queued_at_ms, created_at_ms, ended_at_ms)
select t.project_id, t.task_id, t.id, 'default', s.status, 1, g, case when ql.is_terminal(s.status) then 2 end
  from (values (:'t1'::uuid, 'queued', 3), (:'t1', 'failed', 2), (:'t2', 'succeeded', 4), (:'t2', 'failed', 1),
               (:'t3', 'running', 5)) v (task, status, n)
  join ql.task_execution_revisions t on t.task_id = v.task
  cross join lateral (select v.status::ql.run_status as status) s
  cross join generate_series(1, v.n) g;

select is(ql.run_statuses(:'p'), '{failed,queued,succeeded}'::ql.run_status[],
  'a Project''s Runs: each status once, in order, none of another Project''s');
select is(ql.run_statuses(:'p', :'t1'), '{failed,queued}'::ql.run_status[], 'a task''s Runs: its own statuses only');
select is(ql.run_statuses(:'q', :'t1'), '{}'::ql.run_status[], 'a task of another Project has no Runs here');
select is(ql.run_statuses(null), '{}'::ql.run_status[], 'no Project: no statuses');

select * from finish();
rollback;
