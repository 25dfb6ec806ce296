-- Tests ql.outcome: {"status", "reason"} for every status and reason of the catalogue (the enum types of
-- ql/outcome_reasons), and 22P02 for anything else, so an unknown reason never leaves the database.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(14);

-- ---------------------------------------------------------------------------------------------
-- Structure: a private helper; stable (enum input is), nobody but the owner executes it.
select function_returns('ql', 'outcome', array['text', 'text'], 'jsonb', 'an outcome is a jsonb object');
select volatility_is('ql', 'outcome', array['text', 'text'], 'stable',
  'casting to an enum type is stable, so the outcome is too');
select function_privs_are('ql', 'outcome', array['text', 'text'], 'ql_runtime', array[]::text[],
  'the runtime role may not execute the private helper');
select function_privs_are('ql', 'outcome', array['text', 'text'], 'public', array[]::text[],
  'PUBLIC may not execute the private helper');

-- ---------------------------------------------------------------------------------------------
-- Every reason of the catalogue passes, under its own status only.
create function pg_temp.passes(p_status text, p_reasons text[]) returns boolean language sql
return (select pg_catalog.bool_and(ql.outcome(p_status, r) = jsonb_build_object('status', p_status, 'reason', r))
        from unnest(p_reasons) r);
select ok(pg_temp.passes('fenced', enum_range(null::ql.fence_reason)::text[]), 'every fence reason passes');
select ok(pg_temp.passes('invalid', enum_range(null::ql.invalid_reason)::text[]), 'every invalid reason passes');
select ok(pg_temp.passes('empty', enum_range(null::ql.empty_reason)::text[]), 'every empty reason passes');
select ok(pg_temp.passes('not_found', enum_range(null::ql.not_found_reason)::text[]), 'every not_found reason passes');
select is(ql.outcome('fenced', 'stale_version'), '{"status": "fenced", "reason": "stale_version"}'::jsonb,
  'the outcome is exactly {"status", "reason"}');

-- ---------------------------------------------------------------------------------------------
-- Anything else raises: an unknown reason, a reason of another status, an unknown status.
select throws_ok($$select ql.outcome('fenced', 'no_such_reason')$$, '22P02', null, 'an unknown fence reason raises');
select throws_ok($$select ql.outcome('invalid', 'no_such_field')$$, '22P02', null, 'an unknown invalid reason raises');
select throws_ok($$select ql.outcome('fenced', 'no_work')$$, '22P02', null,
  'an empty reason is no fence reason: each status has its own reasons');
select throws_ok($$select ql.outcome('not_found', 'worker_id')$$, '22P02', null,
  'an invalid reason is no not_found reason');
select throws_ok($$select ql.outcome('failed', 'stale_version')$$, '22P02', null, 'an unknown status raises');

select * from finish();
rollback;
