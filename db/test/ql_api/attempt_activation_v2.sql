-- Tests ql_api.attempt_activation_v2 and ql_api.run_timeline_v2: a start failure's message is kept on its Attempt
-- and shown with the Attempt's end (the stored event unchanged); every other answer is v1's; a message outside its
-- shape, or with another phase, is invalid (error_message) and changes nothing; structure and grants.
begin;
\ir ../fixtures.psql
select plan(33);

create function pg_temp.activate2(p_phase text, p_worker uuid, p_session uuid, o jsonb, p_error text default null,
                                  p_message text default null)
returns jsonb language sql
return ql_api.attempt_activation_v2(p_phase, p_worker, p_session, 1, (o->>'projectId')::uuid, (o->>'runId')::uuid,
  (o->>'attemptId')::uuid, (o->>'offerId')::uuid, (o->>'leaseGeneration')::bigint,
  sha256(convert_to('token-a', 'UTF8')), p_error, p_message);
-- The payload (jsonb) of a Run's event of `p_type`, as run_timeline_v2 (or v1) answers it.
create function pg_temp.shown(p_project uuid, p_run uuid, p_type text, p_v2 boolean default true)
returns jsonb language sql
return (select (e ->> 'payload')::jsonb
          from jsonb_array_elements(case when p_v2 then ql_api.run_timeline_v2(p_project, p_run)
                                         else ql_api.run_timeline_v1(p_project, p_run) end -> 'events') e
         where e ->> 'type' = p_type);

-- Structure: SECURITY DEFINER functions, executable by the runtime role and nobody else.
select is_definer('ql_api', 'attempt_activation_v2',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'text'],
  'attempt_activation_v2 runs as its owner (SECURITY DEFINER)');
select is((select p.proconfig from pg_catalog.pg_proc p where p.oid =
           'ql_api.attempt_activation_v2(text, uuid, uuid, bigint, uuid, uuid, uuid, uuid, bigint, bytea, text, text)'::regprocedure),
  array['search_path=pg_catalog, pg_temp'], 'attempt_activation_v2 pins search_path to pg_catalog, pg_temp');
select function_privs_are('ql_api', 'attempt_activation_v2',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'text'],
  'ql_runtime', array['EXECUTE'], 'the runtime role may execute attempt_activation_v2');
select function_privs_are('ql_api', 'attempt_activation_v2',
  array['text', 'uuid', 'uuid', 'bigint', 'uuid', 'uuid', 'uuid', 'uuid', 'bigint', 'bytea', 'text', 'text'],
  'public', array[]::text[], 'PUBLIC may not execute attempt_activation_v2');
select is_definer('ql_api', 'run_timeline_v2', array['uuid', 'uuid'], 'run_timeline_v2 is SECURITY DEFINER');
select function_privs_are('ql_api', 'run_timeline_v2', array['uuid', 'uuid'], 'ql_runtime', array['EXECUTE'],
  'the runtime role may execute run_timeline_v2');
select function_privs_are('ql_api', 'run_timeline_v2', array['uuid', 'uuid'], 'public', array[]::text[],
  'PUBLIC may not execute run_timeline_v2');

select pg_temp.mk_project() as project \gset
select pg_temp.mk_project() as project2 \gset
select pg_temp.mk_revision(:'project', '{"argv": ["true"], "maxAttempts": 1}') as rev \gset
select pg_temp.mk_worker() as w \gset
set local role ql_runtime;
select pg_temp.open_session(:'w', 16) as s \gset
reset role;

-- 1. A start failure with its message: applied, the message kept on the Attempt and shown with its end.
select pg_temp.mk_run(:'rev') as a_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as oa \gset
select pg_temp.activate2('start_failure', :'w', :'s', :'oa', 'plan.root_not_allowed',
  'the plan names no user and this Worker does not run tasks as root') as a_fail \gset
reset role;
select is(:'a_fail'::jsonb ->> 'status', 'applied', 'a start failure with its message is applied');
select is(:'a_fail'::jsonb -> 'snapshot' ->> 'errorCode', 'plan.root_not_allowed', 'the snapshot names its code');
select is((select (status::text, error_code, error_message) from ql.run_attempts where id = (:'oa'::jsonb ->> 'attemptId')::uuid),
  ('failed'::text, 'plan.root_not_allowed'::text, 'the plan names no user and this Worker does not run tasks as root'::text),
  'the Attempt failed with the code and keeps the message');
select is((select status::text from ql.runs where id = :'a_run'), 'failed', 'its Run failed (one Attempt allowed)');
set local role ql_runtime;
select is(pg_temp.shown(:'project', :'a_run', 'attempt.failed'),
  jsonb_build_object('attemptNo', 1, 'errorCode', 'plan.root_not_allowed',
                     'errorMessage', 'the plan names no user and this Worker does not run tasks as root'),
  'run_timeline_v2 shows the message beside the code in the Attempt''s end');
select is(pg_temp.shown(:'project', :'a_run', 'attempt.failed', false),
  '{"attemptNo": 1, "errorCode": "plan.root_not_allowed"}'::jsonb, 'run_timeline_v1 answers as before');
select is(pg_temp.shown(:'project', :'a_run', 'run.failed'), pg_temp.shown(:'project', :'a_run', 'run.failed', false),
  'the other events are v1''s');
select is(ql_api.run_timeline_v2(:'project2', :'a_run'), ql_api.run_timeline_v1(:'project2', :'a_run'),
  'a Run of another Project is v1''s not_found');
reset role;
select is((select payload from ql.run_events where run_id = :'a_run' and type = 'attempt.failed'),
  '{"attemptNo": 1, "errorCode": "plan.root_not_allowed"}'::jsonb, 'the stored event is as it was written');

-- A replay (another message): already_terminal, and nothing changes.
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate2('start_failure', :'w', :'s', :'oa', 'plan.root_not_allowed', 'another message') ->> 'status',
  'already_terminal', 'a replayed start failure answers already_terminal');
reset role;
select is(pg_temp.state(), :'before', 'the replay changes nothing (the first message stays)');

-- 2. Bad input: invalid (error_message), or v1's invalid (error_code), and nothing changes.
select pg_temp.mk_run(:'rev') as b_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as ob \gset
reset role;
select pg_temp.state() as before \gset
set local role ql_runtime;
select is(pg_temp.activate2('start_failure', :'w', :'s', :'ob', 'spawn.os_error', ''),
  '{"status": "invalid", "reason": "error_message"}'::jsonb, 'an empty message is invalid');
select is(pg_temp.activate2('start_failure', :'w', :'s', :'ob', 'spawn.os_error', repeat('m', 201)),
  '{"status": "invalid", "reason": "error_message"}'::jsonb, 'a message of 201 characters is invalid');
select is(pg_temp.activate2('start_failure', :'w', :'s', :'ob', 'spawn.os_error', E'two\nlines'),
  '{"status": "invalid", "reason": "error_message"}'::jsonb, 'a message with a control character is invalid');
select is(pg_temp.activate2('start_failure', :'w', :'s', :'ob', 'spawn.os_error', U&'a\2028b'),
  '{"status": "invalid", "reason": "error_message"}'::jsonb, 'a message with a line separator is invalid');
select is(pg_temp.activate2('starting', :'w', :'s', :'ob', null, 'why'),
  '{"status": "invalid", "reason": "error_message"}'::jsonb, 'a message with a starting ACK is invalid');
select is(pg_temp.activate2('start_failure', :'w', :'s', :'ob', repeat('x', 65), 'why'),
  '{"status": "invalid", "reason": "error_code"}'::jsonb, 'an oversized code is invalid (error_code)');
select is(pg_temp.activate2('start_failure', :'w', :'s', :'ob', 'Not A Code', 'why'),
  '{"status": "invalid", "reason": "error_code"}'::jsonb, 'a code outside the pattern is invalid (error_code)');
select is(pg_temp.activate2('start_failure', :'w', :'s', :'ob', null, 'why'),
  '{"status": "invalid", "reason": "error_code"}'::jsonb, 'a start failure without a code is invalid (error_code)');
reset role;
select is(pg_temp.state(), :'before', 'bad input changes nothing');
select is((select count(*)::int from ql.run_attempts where error_message is not null), 1, 'no message was written');

-- 3. Without a message v2 is v1: starting and running apply, a start failure keeps no message.
set local role ql_runtime;
select is(pg_temp.activate2('starting', :'w', :'s', :'ob') ->> 'status', 'applied', 'v2 applies a starting ACK');
select is(pg_temp.activate2('running', :'w', :'s', :'ob') ->> 'status', 'applied', 'v2 applies a running ACK');
reset role;
select pg_temp.mk_run(:'rev') as c_run \gset
set local role ql_runtime;
select pg_temp.pull(:'w', :'s') as oc \gset
select is(pg_temp.activate2('start_failure', :'w', :'s', :'oc', 'spawn.os_error') ->> 'status', 'applied',
  'a start failure without a message (a Worker of the previous release) is applied');
select is(ql_api.run_timeline_v2(:'project', :'c_run'), ql_api.run_timeline_v1(:'project', :'c_run'),
  'its timeline is v1''s');
reset role;
select is((select error_message from ql.run_attempts where id = (:'oc'::jsonb ->> 'attemptId')::uuid), null,
  'and its Attempt keeps no message');

select * from finish();
rollback;
