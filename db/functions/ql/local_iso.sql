-- ql.local_iso: an instant as ISO 8601 local time with its UTC offset in an IANA time zone, to the second.
create or replace function ql.local_iso(p_at timestamptz, p_tz text)
returns text
language sql
stable
parallel safe
-- How operator answers show a schedule's fire times (task_schedule_show_v1).
-- Stable: the result depends on the time zone database.
return (
  select pg_catalog.to_char(p_at at time zone p_tz, 'YYYY-MM-DD"T"HH24:MI:SS')
         || case when x.minutes < 0 then '-' else '+' end
         || pg_catalog.to_char(pg_catalog.make_interval(mins => pg_catalog.abs(x.minutes)), 'HH24:MI')
    from (select (extract(epoch from (p_at at time zone p_tz) - (p_at at time zone 'UTC')) / 60)::integer as minutes) x);

comment on function ql.local_iso(timestamp with time zone, text) is
'Returns text such as 2024-03-31T03:30:00+02:00; NULL for a NULL argument. Raises 22023 for an unknown time '
'zone.';
