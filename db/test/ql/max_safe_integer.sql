-- Tests ql.max_safe_integer: 2^53 - 1, a constant the planner folds, and the bound the API functions check against.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(4);

select volatility_is('ql', 'max_safe_integer', array[]::text[], 'immutable', 'immutable: folded into a constant');
select is(ql.max_safe_integer(), (2::numeric ^ 53 - 1)::bigint, '2^53 - 1');
select is(ql.max_safe_integer(), 9007199254740991::bigint, 'the largest integer a JSON number (a double) holds exactly');
select is(ql_api.worker_session_heartbeat_v1(gen_random_uuid(), gen_random_uuid(), ql.max_safe_integer() + 1),
          '{"status": "invalid", "reason": "worker_generation"}'::jsonb,
          'one past it is invalid input (here a generation)');

select * from finish();
rollback;
