-- ql.plan_is_valid: the exact shape of a task revision plan (argv, env, timeoutMs, maxAttempts, retryBackoffMs, pool).
begin;
\ir ../fixtures.psql
select plan(15);

select pg_temp.mk_revision(pg_temp.mk_project()) as rev \gset

select ok(ql.plan_is_valid('{"argv": ["true"]}'), 'argv alone is a plan (no timeout)');
select ok(ql.plan_is_valid('{"argv": ["sh", "-c", "x"], "env": {"A": "1"}, "timeoutMs": 5000, "maxAttempts": 3, "retryBackoffMs": 0, "pool": "edge-1"}'),
          'every documented key');
select ok(not ql.plan_is_valid('{}'), 'argv is required');
select is(ql.plan_is_valid('{"argv": null}'), false, 'the check answers false, never NULL (a CHECK lets NULL pass)');
select ok(not ql.plan_is_valid('{"argv": []}'), 'argv is not empty');
select ok(not ql.plan_is_valid('{"argv": [1]}'), 'argv holds strings');
select ok(not ql.plan_is_valid('{"argv": ["true"], "shell": true}'), 'an unknown key is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "timeoutMs": 0}'), 'a zero timeout is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "timeoutMs": -5}'), 'a negative timeout is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "timeoutMs": 1.5}'), 'a fractional timeout is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "timeoutMs": "5"}'), 'a string timeout is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "maxAttempts": 101}'), 'maxAttempts above 100 is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "env": {"A": 1}}'), 'env values are strings');
select ok(not ql.plan_is_valid('{"argv": ["true"], "pool": "Bad Pool"}'), 'a pool name is [a-z0-9_-]');
select throws_ok(format($$insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)
                         select id, project_id, '{"argv": []}', '00000000-0000-4000-8000-000000000001' from ql.tasks limit 1$$),
                 '23514', null, 'the table refuses an invalid plan');

select * from finish();
rollback;
