-- Tests ql.local_iso: an instant as ISO 8601 local time with its offset, in zones east and west of UTC, with
-- half- and quarter-hour offsets, on both sides of a DST change; NULL in, NULL out.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(9);

select is(ql.local_iso('2024-07-01 12:00Z', 'UTC'), '2024-07-01T12:00:00+00:00', 'UTC');
select is(ql.local_iso('2024-07-01 12:00Z', 'Europe/Berlin'), '2024-07-01T14:00:00+02:00', 'Berlin in summer');
select is(ql.local_iso('2024-01-01 12:00Z', 'Europe/Berlin'), '2024-01-01T13:00:00+01:00', 'Berlin in winter');
select is(ql.local_iso('2024-01-01 12:00Z', 'America/New_York'), '2024-01-01T07:00:00-05:00', 'New York in winter');
select is(ql.local_iso('2024-01-01 12:00Z', 'America/St_Johns'), '2024-01-01T08:30:00-03:30', 'a negative half-hour offset');
select is(ql.local_iso('2024-01-01 12:00Z', 'Asia/Kathmandu'), '2024-01-01T17:45:00+05:45', 'a quarter-hour offset');
select is(ql.local_iso('2024-01-01 12:00:59.999Z', 'UTC'), '2024-01-01T12:00:59+00:00', 'to the second, never rounded up');
select is(ql.local_iso(null, 'UTC'), null, 'a NULL instant is NULL');
select is(ql.local_iso(now(), null), null, 'a NULL zone is NULL');

select * from finish();
rollback;
