-- Tests ql.run_event_insert (through ql.run_event, its callers' way): a duplicate event id or dedupe key of the Run is
-- refused as the unique keys did; and the duplicate check reads only the partitions that can hold the Run's events
-- (a day before its creation to a day after the event), not every month of ql.run_events.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(5);

-- Scans of a partition in this transaction: sequential ones and those of each of its indexes.
create function pg_temp.scans(p_part text) returns bigint language sql
return pg_stat_get_xact_numscans(p_part::regclass)
     + (select coalesce(sum(pg_stat_get_xact_numscans(i.indexrelid)), 0) from pg_index i where i.indrelid = p_part::regclass);
select pg_temp.mk_run(pg_temp.mk_revision(pg_temp.mk_project())) as r \gset
select format('ql.run_events_p%s', to_char(now() at time zone 'UTC', 'YYYYMM')) as this_month,
       format('ql.run_events_p%s', to_char(now() at time zone 'UTC' + interval '6 months', 'YYYYMM')) as later,
       format('ql.run_events_p%s', to_char(now() at time zone 'UTC' + interval '13 months', 'YYYYMM')) as last \gset
select pg_temp.scans(:'this_month') as scans_now,
       pg_temp.scans(:'later') + pg_temp.scans(:'last') as scans_later \gset

select ql.run_event(:'r', null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), 'noted:' || :'r') as seq \gset
select ok(pg_temp.scans(:'this_month') > :scans_now,
  'the duplicate check reads this month''s partition');
select is(pg_temp.scans(:'later') + pg_temp.scans(:'last'), :scans_later::bigint,
  'and not the partitions months ahead (pruned by the Run''s creation and the event''s time)');

select throws_ok(format($$select ql.run_event(%L, null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), 'noted:%s')$$,
                        :'r', :'r'),
  '23505', 'duplicate key value violates unique constraint "run_events_dedupe_key_key"', 'a dedupe key twice is refused');
select (select event_id from ql.run_events where run_id = :'r' and sequence = :seq) as eid \gset
select throws_ok(format($$select ql.run_event(%L, null, 'run.noted', 'system', null, null, '{}', ql.now_ms(), 'other', %L)$$,
                        :'r', :'eid'),
  '23505', 'duplicate key value violates unique constraint "run_events_event_id_key"', 'an event id twice is refused');
select is((select count(*) from ql.run_events where run_id = :'r'), 2::bigint, 'the refused ones wrote nothing');

select * from finish();
rollback;
