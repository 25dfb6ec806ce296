-- Tests ql.stable_event_id: the first 128 bits of SHA-256 over domain|run|attempt|cancel_at, so a retried convergence reproduces its event ids (decision 0000 (ADR-0118 §7)).
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(23);

-- The documented construction, written out again here (not by calling the function under test).
create function pg_temp.sha_id(p_text text) returns uuid language sql immutable
return encode(substr(sha256(convert_to(p_text, 'UTF8')), 1, 16), 'hex')::uuid;

\set run '''00000000-0000-4000-8000-000000000001'''
\set att '''00000000-0000-4000-8000-000000000002'''
\set att2 '''00000000-0000-4000-8000-000000000003'''

-- ---------------------------------------------------------------------------------------------
-- Structure: a private, pure helper; nobody but the owner executes it.
select has_function('ql', 'stable_event_id', array['text', 'uuid', 'uuid', 'bigint'],
  'ql.stable_event_id(domain, run, attempt, cancel_at_ms) exists');
select function_returns('ql', 'stable_event_id', array['text', 'uuid', 'uuid', 'bigint'], 'uuid',
  'a stable event id is a uuid (the type of run_events.event_id)');
select isnt_definer('ql', 'stable_event_id', array['text', 'uuid', 'uuid', 'bigint'],
  'the helper runs with its caller''s rights (it touches no table)');
select volatility_is('ql', 'stable_event_id', array['text', 'uuid', 'uuid', 'bigint'], 'immutable',
  'the id depends on its arguments only: IMMUTABLE');
select function_privs_are('ql', 'stable_event_id', array['text', 'uuid', 'uuid', 'bigint'],
  'ql_runtime', array[]::text[], 'the runtime role may not execute the private helper');
select function_privs_are('ql', 'stable_event_id', array['text', 'uuid', 'uuid', 'bigint'],
  'ql_scheduler', array[]::text[], 'the scheduler role may not execute the private helper (only the page functions)');
select function_privs_are('ql', 'stable_event_id', array['text', 'uuid', 'uuid', 'bigint'],
  'public', array[]::text[], 'PUBLIC may not execute the private helper');
set local role ql_runtime;
select throws_ok($$select ql.stable_event_id('ql.converge.run', gen_random_uuid(), null, 1)$$,
  '42501', 'permission denied for schema ql', 'the runtime role cannot mint convergence event ids');
reset role;

-- ---------------------------------------------------------------------------------------------
-- Exactly the documented construction: the first 16 bytes of SHA-256("domain|run|attempt|cancel_at").
select is(ql.stable_event_id('ql.converge.attempt', :run, :att, 1700000000000),
  pg_temp.sha_id('ql.converge.attempt|00000000-0000-4000-8000-000000000001|00000000-0000-4000-8000-000000000002|1700000000000'),
  'the attempt-event id is the first 128 bits of SHA-256 over domain|run|attempt|cancel_at');
select is(ql.stable_event_id('ql.converge.run', :run, null, 1700000000000),
  pg_temp.sha_id('ql.converge.run|00000000-0000-4000-8000-000000000001|-|1700000000000'),
  'without an Attempt the attempt part is "-"');
-- Known vectors, computed outside PostgreSQL (Python hashlib) so the test does not only agree with itself.
select is(ql.stable_event_id('ql.converge.run', :run, null, 1700000000000),
  '779c8754-95eb-a64e-c220-49e6aa3570dd'::uuid, 'known vector: run domain, no Attempt');
select is(ql.stable_event_id('ql.converge.attempt', :run, :att, 1700000000000),
  'f554ac76-0228-dbbc-293d-3556700c0a7a'::uuid, 'known vector: attempt domain with an Attempt');
select is(replace(ql.stable_event_id('ql.converge.run', :run, :att, 42)::text, '-', ''),
  left(encode(sha256(convert_to('ql.converge.run|00000000-0000-4000-8000-000000000001|00000000-0000-4000-8000-000000000002|42', 'UTF8')), 'hex'), 32),
  'the uuid''s 32 hex digits are the first 32 hex digits of the SHA-256');

-- ---------------------------------------------------------------------------------------------
-- Stable across retries: the same intent gives the same id, every time and in every session.
select is(ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000),
          ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000),
  'the same domain, Run, Attempt and cancel time give the same id (a retried pass reproduces it)');
select is((select count(distinct ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000)) from generate_series(1, 50)),
  1::bigint, 'fifty computations agree: no randomness, no clock');

-- ---------------------------------------------------------------------------------------------
-- Domain separation and every input matters.
select isnt(ql.stable_event_id('ql.converge.attempt', :run, :att, 1700000000000),
            ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000),
  'the attempt and the run event of one convergence get different ids (domain separation)');
select isnt(ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000),
            ql.stable_event_id('ql.converge.run', :att2, :att, 1700000000000),
  'another Run gives another id');
select isnt(ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000),
            ql.stable_event_id('ql.converge.run', :run, :att2, 1700000000000),
  'another Attempt gives another id');
select isnt(ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000),
            ql.stable_event_id('ql.converge.run', :run, null, 1700000000000),
  'an Attempt and no Attempt give different ids');
select isnt(ql.stable_event_id('ql.converge.run', :run, :att, 1700000000000),
            ql.stable_event_id('ql.converge.run', :run, :att, 1700000000001),
  'another cancel timestamp (a different intent) gives another id');
select is((select count(distinct ql.stable_event_id(d, r, a, t))
             from unnest(array['ql.converge.attempt', 'ql.converge.run']) d,
                  unnest(array[:run, :att2]::uuid[]) r,
                  unnest(array[:att, null]::uuid[]) a,
                  generate_series(1700000000000, 1700000000009) t),
  80::bigint, 'eighty distinct (domain, Run, Attempt, time) combinations give eighty distinct ids');

-- ---------------------------------------------------------------------------------------------
-- Never raises: a missing part gives NULL (convergence always has a Run and an intent time).
select is(ql.stable_event_id('ql.converge.run', :run, :att, null), null::uuid,
  'a NULL cancel time gives NULL, not an error (the helper is documented as never raising)');
select lives_ok($$select ql.stable_event_id(null, null, null, null)$$,
  'all-NULL inputs never raise');

select * from finish();
rollback;
