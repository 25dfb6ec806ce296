-- Tests ql_api.run_cancel_request_v1 outside SERIALIZABLE: the function refuses with QLISO (a caller bug) before it
-- reads or writes anything (docs/architecture.md §4 item 7: a SERIALIZABLE short transaction). Isolation is fixed per
-- transaction, so this file starts a plain (READ COMMITTED) transaction; the behaviour inside SERIALIZABLE is
-- in run_cancel_request_v1.sql.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(5);

-- A valid cancellation in every other respect: alice, operator of P, admitted at versions 1/1, a queued Run.
select pg_temp.mk_project('iso-p') as p \gset
select pg_temp.mk_run(pg_temp.mk_revision(:'p')) as r \gset
insert into ql.subjects (kind, name, token_digest) values ('user', 'alice', pg_temp.digest('tok-alice')) returning id as alice \gset
insert into ql.role_bindings (project_id, subject_id, role) values (:'p', :'alice', 'operator');
select is(current_setting('transaction_isolation'), 'read committed', 'setup: this transaction is READ COMMITTED');

select pg_temp.pstate() as before \gset
set local role ql_runtime;
select throws_ok(format($$select ql_api.run_cancel_request_v1(%L, %L, %L, 'iso-1', 1, 1)$$, :'alice', :'p', :'r'),
  'QLISO', 'run_cancel_request_v1 must run in a SERIALIZABLE transaction',
  'a valid cancellation outside SERIALIZABLE raises QLISO');
select throws_ok($$select ql_api.run_cancel_request_v1(null, null, null, null, null, null)$$,
  'QLISO', 'run_cancel_request_v1 must run in a SERIALIZABLE transaction',
  'the isolation is checked first: even invalid arguments raise QLISO outside SERIALIZABLE');
reset role;
select is(pg_temp.pstate(), :'before', 'the refused call wrote no intent, no event, no mutation');
select is((select (r.version, r.event_sequence, r.cancel_requested_at_ms)::text from ql.runs r where r.id = :'r'), '(2,1,)',
  'the Run keeps version 2, event sequence 1 and no intent');

select * from finish();
rollback;
