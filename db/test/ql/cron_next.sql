-- Tests ql.cron_next: seconds (6 fields), strictly after, month ends and year ends, leap years (2100 is not one), Vixie cron's day rule
-- (OR when both day fields are restricted, AND when one starts with *), and daylight saving time in Europe/Berlin,
-- America/New_York and Australia/Lord_Howe (a 30-minute shift): a skipped local time fires past the jump, a
-- repeated one fires once for a fixed time and at both occurrences for a wildcard minute or hour field, so an
-- interval stays evenly spaced in real time. NULL arguments, an infinite bound and an expression no date
-- matches give NULL, within a bounded search; an unknown zone raises. A pure function: no table is touched.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(50);

-- The first n fire times of an expression after a bound, as local ISO 8601 with offset, comma-separated.
create function pg_temp.fires(p_expr text, p_tz text, p_after timestamptz, p_n integer) returns text
language plpgsql as $$
declare
  v_spec ql.cron_spec := (ql.cron_parse(p_expr)).spec;
  v_at timestamptz := p_after;
  v_out text[] := '{}';
begin
  if v_spec is null then raise exception 'pg_temp.fires: % does not parse', p_expr; end if;
  for i in 1..p_n loop
    v_at := ql.cron_next(v_spec, p_tz, v_at);
    v_out := v_out || ql.local_iso(v_at, p_tz);
  end loop;
  return array_to_string(v_out, ', ');
end $$;

-- Every fire time in [p_from, p_to): how many, and the largest gap between two of them in minutes.
create function pg_temp.span(p_expr text, p_tz text, p_from timestamptz, p_to timestamptz) returns text
language plpgsql as $$
declare
  v_spec ql.cron_spec := (ql.cron_parse(p_expr)).spec;
  v_at timestamptz := ql.cron_next(v_spec, p_tz, p_from - interval '1 microsecond');
  v_prev timestamptz;
  v_count integer := 0;
  v_gap interval := interval '0';
begin
  while v_at < p_to loop
    v_count := v_count + 1;
    if v_prev is not null then v_gap := greatest(v_gap, v_at - v_prev); end if;
    v_prev := v_at;
    v_at := ql.cron_next(v_spec, p_tz, v_at);
  end loop;
  return format('%s fires, largest gap %s min', v_count, extract(epoch from v_gap)::integer / 60);
end $$;

-- ---------------------------------------------------------------------------------------------
-- Structure.
select has_function('ql', 'cron_next', array['ql.cron_spec', 'text', 'timestamp with time zone'],
  'ql.cron_next(spec, time zone, after) exists');
select function_returns('ql', 'cron_next', array['ql.cron_spec', 'text', 'timestamp with time zone'],
  'timestamp with time zone', 'it returns a timestamptz');
select is((select p.provolatile::text from pg_proc p
            where p.oid = 'ql.cron_next(ql.cron_spec, text, timestamptz)'::regprocedure), 's',
  'cron_next is stable (it reads the time zone database)');

-- ---------------------------------------------------------------------------------------------
-- 1. Strictly after, to the minute.
select is(pg_temp.fires('* * * * *', 'UTC', '2024-05-01 12:00:00Z', 2), '2024-05-01T12:01:00+00:00, 2024-05-01T12:02:00+00:00',
  'after a fire time exactly, the next one is the next minute (strictly after)');
select is(pg_temp.fires('* * * * *', 'UTC', '2024-05-01 12:00:30.5Z', 1), '2024-05-01T12:01:00+00:00',
  'after 12:00:30.5 comes 12:01:00 (fire times are whole minutes)');
select is(pg_temp.fires('0 9 * * *', 'UTC', '2024-05-01 08:59:59.999999Z', 2), '2024-05-01T09:00:00+00:00, 2024-05-02T09:00:00+00:00',
  'a microsecond before a fire time, that fire time');
select is(pg_temp.fires('0 9 * * mon-fri', 'UTC', '2024-03-08 18:00Z', 2), '2024-03-11T09:00:00+00:00, 2024-03-12T09:00:00+00:00',
  'weekdays only: after Friday evening comes Monday');

-- 2. Month ends, year ends, leap years.
select is(pg_temp.fires('0 0 31 * *', 'UTC', '2024-01-31 00:00Z', 4),
  '2024-03-31T00:00:00+00:00, 2024-05-31T00:00:00+00:00, 2024-07-31T00:00:00+00:00, 2024-08-31T00:00:00+00:00',
  'the 31st skips the months without one');
select is(pg_temp.fires('0 0 30 * *', 'UTC', '2023-01-30 00:00Z', 2), '2023-03-30T00:00:00+00:00, 2023-04-30T00:00:00+00:00',
  'the 30th skips February');
select is(pg_temp.fires('59 23 31 12 *', 'UTC', '2024-12-31 23:59Z', 2), '2025-12-31T23:59:00+00:00, 2026-12-31T23:59:00+00:00',
  'the last minute of the year, year after year');
select is(pg_temp.fires('0 0 1 1 *', 'UTC', '2024-12-31 23:59:59Z', 1), '2025-01-01T00:00:00+00:00', 'across the new year');
select is(pg_temp.fires('0 0 29 2 *', 'UTC', '2024-03-01Z', 3),
  '2028-02-29T00:00:00+00:00, 2032-02-29T00:00:00+00:00, 2036-02-29T00:00:00+00:00', 'February 29 comes in leap years only');
select is(pg_temp.fires('0 0 29 2 *', 'UTC', '2096-03-01Z', 1), '2104-02-29T00:00:00+00:00',
  '2100 is not a leap year: after 2096 comes 2104');
select is(pg_temp.fires('0 0 29 2 */7', 'UTC', '2024-03-01Z', 3),
  '2032-02-29T00:00:00+00:00, 2060-02-29T00:00:00+00:00, 2088-02-29T00:00:00+00:00',
  'February 29 AND a Sunday (the weekday field starts with *): every 28 years');
select is(pg_temp.fires('0 0 29 2 */7', 'UTC', '2088-03-01Z', 1), '2128-02-29T00:00:00+00:00',
  'February 29 AND a Sunday across 2100: 40 years later, still found');
select is(pg_temp.fires('0 0 28-31 2 *', 'UTC', '2023-02-27Z', 3),
  '2023-02-28T00:00:00+00:00, 2024-02-28T00:00:00+00:00, 2024-02-29T00:00:00+00:00', 'the end of February, leap or not');

-- 3. Vixie cron's day rule.
select is(pg_temp.fires('0 12 13 * 5', 'UTC', '2024-01-01Z', 4),
  '2024-01-05T12:00:00+00:00, 2024-01-12T12:00:00+00:00, 2024-01-13T12:00:00+00:00, 2024-01-19T12:00:00+00:00',
  'both day fields restricted: the 13th OR a Friday');
select is(pg_temp.fires('0 12 */13 * 5', 'UTC', '2024-01-01Z', 4),
  '2024-03-01T12:00:00+00:00, 2024-06-14T12:00:00+00:00, 2024-09-27T12:00:00+00:00, 2024-11-01T12:00:00+00:00',
  'the day-of-month field starts with * (*/13: the 1st, 14th, 27th): AND a Friday');
select is(pg_temp.fires('0 12 1 * */3', 'UTC', '2024-01-01Z', 2), '2024-05-01T12:00:00+00:00, 2024-06-01T12:00:00+00:00',
  'the day-of-week field starts with * (*/3: Sunday, Wednesday, Saturday): the 1st AND one of them (not Jan to Apr)');
select is(pg_temp.fires('0 0 1 * *', 'UTC', '2024-01-15Z', 2), '2024-02-01T00:00:00+00:00, 2024-03-01T00:00:00+00:00',
  'a day of month with an unrestricted weekday: that day every month');
select is(pg_temp.fires('0 0 * * 1', 'UTC', '2024-01-01Z', 2), '2024-01-08T00:00:00+00:00, 2024-01-15T00:00:00+00:00',
  'a weekday with an unrestricted day of month: every Monday');

-- 4. Europe/Berlin, 2024-03-31: 02:00 CET becomes 03:00 CEST.
select is(pg_temp.fires('30 2 * * *', 'Europe/Berlin', '2024-03-29 12:00Z', 3),
  '2024-03-30T02:30:00+01:00, 2024-03-31T03:30:00+02:00, 2024-04-01T02:30:00+02:00',
  'Berlin, spring: 02:30 does not exist on March 31 and fires at 03:30 CEST, the same distance past the jump');
select is(pg_temp.fires('*/30 * * * *', 'Europe/Berlin', '2024-03-31 00:00Z', 4),
  '2024-03-31T01:30:00+01:00, 2024-03-31T03:00:00+02:00, 2024-03-31T03:30:00+02:00, 2024-03-31T04:00:00+02:00',
  'Berlin, spring: every 30 minutes stays every 30 real minutes (02:00 and 02:30 land on 03:00 and 03:30, once each)');
select is(pg_temp.fires('0,30 2,3 * * *', 'Europe/Berlin', '2024-03-31 00:00Z', 3),
  '2024-03-31T03:00:00+02:00, 2024-03-31T03:30:00+02:00, 2024-04-01T02:00:00+02:00',
  'Berlin, spring: a skipped time and the real time it lands on fire once');
select is(pg_temp.span('*/15 * * * *', 'Europe/Berlin', '2024-03-31 00:00+01', '2024-04-01 00:00+02'),
  '92 fires, largest gap 15 min', 'Berlin, spring: the 23-hour day has 92 quarter hours, never more than 15 minutes apart');

-- Europe/Berlin, 2024-10-27: 03:00 CEST becomes 02:00 CET, so 02:00-02:59 happens twice.
select is(pg_temp.fires('30 2 * * *', 'Europe/Berlin', '2024-10-26 12:00Z', 2),
  '2024-10-27T02:30:00+02:00, 2024-10-28T02:30:00+01:00',
  'Berlin, autumn: a fixed 02:30 fires once, at its first occurrence (summer time)');
select is(pg_temp.fires('15 2,3 * * *', 'Europe/Berlin', '2024-10-27 00:00+02', 3),
  '2024-10-27T02:15:00+02:00, 2024-10-27T03:15:00+01:00, 2024-10-28T02:15:00+01:00',
  'Berlin, autumn: fixed times fire once each, the repeated 02:15 at its first occurrence');
select is(pg_temp.fires('*/30 * * * *', 'Europe/Berlin', '2024-10-26 23:30Z', 5),
  '2024-10-27T02:00:00+02:00, 2024-10-27T02:30:00+02:00, 2024-10-27T02:00:00+01:00, 2024-10-27T02:30:00+01:00, 2024-10-27T03:00:00+01:00',
  'Berlin, autumn: a wildcard interval fires at both occurrences of the repeated hour');
select is(pg_temp.fires('0 * * * *', 'Europe/Berlin', '2024-10-26 23:30Z', 3),
  '2024-10-27T02:00:00+02:00, 2024-10-27T02:00:00+01:00, 2024-10-27T03:00:00+01:00',
  'Berlin, autumn: hourly stays hourly in real time');
select is(pg_temp.span('*/15 * * * *', 'Europe/Berlin', '2024-10-27 00:00+02', '2024-10-28 00:00+01'),
  '100 fires, largest gap 15 min', 'Berlin, autumn: the 25-hour day has 100 quarter hours, never more than 15 minutes apart');
select is(pg_temp.span('* 2 * * *', 'Europe/Berlin', '2024-10-27 00:00+02', '2024-10-28 00:00+01'),
  '120 fires, largest gap 1 min',
  'Berlin, autumn: every minute of 2 a.m. (minute field *) fires in both 2 a.m. hours, one real minute apart');
select is(pg_temp.span('0 0 * * *', 'Europe/Berlin', '2024-01-01 00:00+01', '2025-01-01 00:00+01'),
  '366 fires, largest gap 1500 min',
  'Berlin: local midnight every day of 2024, whatever the offset (the 25-hour day is the longest gap)');

-- 5. America/New_York, 2024-03-10 (02:00 EST becomes 03:00 EDT) and 2024-11-03 (02:00 EDT becomes 01:00 EST).
select is(pg_temp.fires('30 2 * * *', 'America/New_York', '2024-03-09 00:00-05', 3),
  '2024-03-09T02:30:00-05:00, 2024-03-10T03:30:00-04:00, 2024-03-11T02:30:00-04:00',
  'New York, spring: the skipped 02:30 fires at 03:30 EDT');
select is(pg_temp.fires('30 1 * * *', 'America/New_York', '2024-11-02 12:00Z', 2),
  '2024-11-03T01:30:00-04:00, 2024-11-04T01:30:00-05:00', 'New York, autumn: a fixed 01:30 fires once (EDT)');
select is(pg_temp.fires('30 * * * *', 'America/New_York', '2024-11-03 04:00Z', 4),
  '2024-11-03T00:30:00-04:00, 2024-11-03T01:30:00-04:00, 2024-11-03T01:30:00-05:00, 2024-11-03T02:30:00-05:00',
  'New York, autumn: hourly at :30 fires in both 1 a.m. hours');
select is(pg_temp.span('*/15 * * * *', 'America/New_York', '2024-03-10 00:00-05', '2024-03-11 00:00-04'),
  '92 fires, largest gap 15 min', 'New York, spring: 92 quarter hours, evenly spaced');
select is(pg_temp.span('*/15 * * * *', 'America/New_York', '2024-11-03 00:00-04', '2024-11-04 00:00-05'),
  '100 fires, largest gap 15 min', 'New York, autumn: 100 quarter hours, evenly spaced');

-- 6. Australia/Lord_Howe shifts by 30 minutes (+10:30 and +11).
select is(pg_temp.fires('*/15 * * * *', 'Australia/Lord_Howe', '2024-10-06 01:40+10:30', 4),
  '2024-10-06T01:45:00+10:30, 2024-10-06T02:30:00+11:00, 2024-10-06T02:45:00+11:00, 2024-10-06T03:00:00+11:00',
  'Lord Howe, spring: 02:00-02:29 is skipped, and the quarter hours stay 15 real minutes apart');
select is(pg_temp.fires('*/15 * * * *', 'Australia/Lord_Howe', '2024-04-07 01:20+11', 5),
  '2024-04-07T01:30:00+11:00, 2024-04-07T01:45:00+11:00, 2024-04-07T01:30:00+10:30, 2024-04-07T01:45:00+10:30, 2024-04-07T02:00:00+10:30',
  'Lord Howe, autumn: 01:30-01:59 happens twice, and the wildcard fires in both');

-- 7. NULLs, bounds, errors.
select is(ql.cron_next(null, 'UTC', now()), null, 'a NULL spec: NULL');
select is(ql.cron_next((ql.cron_parse('* * * * *')).spec, null, now()), null, 'a NULL time zone: NULL');
select is(ql.cron_next((ql.cron_parse('* * * * *')).spec, 'UTC', null), null, 'a NULL bound: NULL');
select is(ql.cron_next((ql.cron_parse('* * * * *')).spec, 'UTC', 'infinity'), null, 'an infinite bound: NULL');
select throws_ok($$select ql.cron_next((ql.cron_parse('* * * * *')).spec, 'Mars/Olympus_Mons', now())$$, '22023', null,
  'an unknown time zone raises 22023');
select pg_catalog.clock_timestamp() as started \gset
select is(ql.cron_next(row('{0}', '{0}', '{0}', '{30}', '{2}', '{0,1,2,3,4,5,6}', true, false, false)::ql.cron_spec, 'UTC',
                       '2024-01-01Z'), null,
  'a spec no date matches (February 30, which ql.cron_parse refuses) gives NULL: the search stops after 400 years');
select ok(pg_catalog.clock_timestamp() - :'started'::timestamptz < interval '2 seconds',
  'and the bounded search over 400 years takes under 2 seconds (a day-wise search, months skipped whole)');

-- 8. Seconds (6 fields): strictly after, across a minute, with the other fields.
select is(pg_temp.fires('*/15 * * * * *', 'UTC', '2026-01-01 00:00:07Z', 4),
  '2026-01-01T00:00:15+00:00, 2026-01-01T00:00:30+00:00, 2026-01-01T00:00:45+00:00, 2026-01-01T00:01:00+00:00',
  'every 15 seconds, from 7 s past the minute: 15, 30, 45, then the next minute');
select is(pg_temp.fires('30 0 12 * * *', 'UTC', '2026-01-01 12:00:30Z', 2),
  '2026-01-02T12:00:30+00:00, 2026-01-03T12:00:30+00:00', 'a fixed second of a fixed time: strictly after it');
select is(pg_temp.fires('* * * * *', 'UTC', '2026-01-01 00:00:00.5Z', 1), '2026-01-01T00:01:00+00:00',
  'five fields fire at second 0 (half a second past it, the next minute)');
select is(pg_temp.fires('*/20 30 2 * * *', 'Europe/Berlin', '2026-10-25 00:00Z', 6),
  '2026-10-25T02:30:00+02:00, 2026-10-25T02:30:20+02:00, 2026-10-25T02:30:40+02:00, '
  || '2026-10-25T02:30:00+01:00, 2026-10-25T02:30:20+01:00, 2026-10-25T02:30:40+01:00',
  'a wildcard second field fires at both occurrences of a repeated local time, evenly');

select * from finish();
rollback;
