-- ql.plan_is_valid: the exact shape of a task revision plan (argv, env, timeoutMs, maxAttempts, retryBackoffMs,
-- pool, cwd, user, group, bundle).
begin;
\ir ../fixtures.psql
select plan(29);

select pg_temp.mk_revision(pg_temp.mk_project()) as rev \gset

select ok(ql.plan_is_valid('{"argv": ["true"]}'), 'argv alone is a plan (no timeout)');
select ok(ql.plan_is_valid('{"argv": ["sh", "-c", "x"], "env": {"A": "1"}, "timeoutMs": 5000, "maxAttempts": 3, "retryBackoffMs": 0, "pool": "edge-1", "cwd": "out/x", "user": "nobody", "group": "_build-1"}'),
          'every documented key');
select ok(ql.plan_is_valid('{"argv": ["true"], "cwd": "/srv/data"}'), 'an absolute cwd is a shape the Worker may allow');
select ok(not ql.plan_is_valid('{"argv": ["true"], "cwd": ""}'), 'an empty cwd is refused');
select ok(not ql.plan_is_valid(pg_catalog.jsonb_build_object('argv', '["true"]'::jsonb, 'cwd', pg_catalog.repeat('a', 4097))),
          'a cwd over 4096 chars is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "cwd": 1}'), 'cwd is a string');
select ok(not ql.plan_is_valid('{"argv": ["true"], "user": "Root"}'), 'a user name is [a-z_][a-z0-9_-]*');
select ok(not ql.plan_is_valid('{"argv": ["true"], "user": "1000"}'), 'a user is a name, not a uid');
select ok(not ql.plan_is_valid(pg_catalog.jsonb_build_object('argv', '["true"]'::jsonb, 'user', pg_catalog.repeat('a', 33))),
          'a user name over 32 chars is refused');
select ok(not ql.plan_is_valid('{"argv": ["true"], "group": "a b"}'), 'a group name is [a-z_][a-z0-9_-]*');
select ok(not ql.plan_is_valid('{"argv": ["true"], "group": null}'), 'group is a string');
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
select ok(ql.plan_is_valid(jsonb_build_object('argv', '["sh", "run.sh"]'::jsonb, 'bundle', repeat('0a', 32))),
          'a bundle named by 64 lowercase hex is a plan');
select ok(not ql.plan_is_valid(jsonb_build_object('argv', '["true"]'::jsonb, 'bundle', repeat('0A', 32))),
          'a bundle digest is lowercase hex');
select ok(not ql.plan_is_valid(jsonb_build_object('argv', '["true"]'::jsonb, 'bundle', repeat('0a', 31))),
          'a bundle digest is 64 characters');
select ok(not ql.plan_is_valid('{"argv": ["true"], "bundle": null}'), 'bundle null is refused (absent: no bundle)');
select ok(not ql.plan_is_valid(jsonb_build_object('argv', '["true"]'::jsonb, 'bundle', jsonb_build_array(repeat('0a', 32)))),
          'one bundle, a string');
select throws_ok(format($$insert into ql.task_execution_revisions (task_id, project_id, plan_json, executor_revision_id)
                         select id, project_id, '{"argv": []}', '00000000-0000-4000-8000-000000000001' from ql.tasks limit 1$$),
                 '23514', null, 'the table refuses an invalid plan');

select * from finish();
rollback;
