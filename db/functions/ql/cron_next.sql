-- ql.cron_next: the first fire time of a parsed cron expression strictly after p_after, in an IANA time zone.
create or replace function ql.cron_next(p_spec ql.cron_spec, p_tz text, p_after timestamptz)
returns timestamptz
language plpgsql
stable
parallel safe
as $$
-- NULL when an argument is NULL, or when no fire time exists
-- within 400 years, or p_after is infinite (never for an expression ql.cron_parse accepted: it refuses one that never fires).
-- Search: day by day on the local calendar (a month the month field lacks is skipped whole), and within a
-- matching day hour by hour, then minute by minute and second by second, never over those that cannot be later than p_after: a
-- call costs a few dozen steps for an everyday expression, and at most about 30 steps a year (one February a
-- year, for `0 0 29 2 */7`, whose next fire time can be decades away).
-- Daylight saving time (docs/operations.md, "Schedules"):
-- * a local time the clock skips (spring forward: 02:30 in Europe/Berlin on the last Sunday of March) fires
--   at the instant PostgreSQL reads it as, the same distance past the jump (03:30 summer time); a fire
--   time that lands on the same instant as another fires once;
-- * a local time the clock repeats (fall back: 02:30 in Europe/Berlin on the last Sunday of October) fires
--   once, at its first occurrence (still summer time), unless the expression's second, minute or hour field starts
--   with `*` (spec.wildcard_time: an interval such as `*/15 * * * *` or `0 * * * *`): that fires at both
--   occurrences, so its spacing in real time stays even.
-- Assumes a zone changes its UTC offset at most once within three days (true of every zone of tzdata).
-- Stable: the result depends on the time zone database.
declare
  v_after timestamp;   -- p_after as a UTC wall clock: every comparison below is in UTC
  v_day date;
  v_dom boolean;       -- the day matches the day-of-month field, the day-of-week field
  v_dow boolean;
  v_last date;
  v_midnight timestamptz;
  v_o1 interval;       -- the UTC offset just before the day, and just after it
  v_o2 interval;
  v_omin interval;
  v_omax interval;
  v_local timestamp;
  v_t1 timestamp;
  v_t2 timestamp;
  v_ok1 boolean;
  v_ok2 boolean;
  v_best timestamp;
  h smallint;
  m smallint;
  sec smallint;
begin
  if p_spec is null or p_tz is null or p_after is null or not pg_catalog.isfinite(p_after) then
    return null;
  end if;
  v_after := p_after at time zone 'UTC';
  v_day := (p_after at time zone p_tz)::date;
  v_last := (v_day + interval '400 years')::date;
  while v_day <= v_last loop
    if not (extract(month from v_day)::smallint = any (p_spec.months)) then
      v_day := (pg_catalog.date_trunc('month', v_day) + interval '1 month')::date;
      continue;
    end if;
    v_dom := extract(day from v_day)::smallint = any (p_spec.days_of_month);
    v_dow := extract(dow from v_day)::smallint = any (p_spec.days_of_week);
    if (p_spec.dom_restricted and p_spec.dow_restricted and (v_dom or v_dow)) or (v_dom and v_dow) then
      -- A local time L of this day happens at L - offset; the offset is v_o1 or v_o2 (equal on most days).
      v_midnight := v_day::timestamp at time zone p_tz;
      v_o1 := ((v_midnight - interval '1 day') at time zone p_tz) - ((v_midnight - interval '1 day') at time zone 'UTC');
      v_o2 := ((v_midnight + interval '2 days') at time zone p_tz) - ((v_midnight + interval '2 days') at time zone 'UTC');
      v_omin := least(v_o1, v_o2);
      v_omax := greatest(v_o1, v_o2);
      <<hours>>
      foreach h in array p_spec.hours loop
        continue when v_day + pg_catalog.make_interval(hours => h, mins => 59, secs => 59) - v_omin <= v_after;
        foreach m in array p_spec.minutes loop
          continue when v_day + pg_catalog.make_interval(hours => h, mins => m, secs => 59) - v_omin <= v_after;
          foreach sec in array coalesce(p_spec.seconds, '{0}') loop
            v_local := v_day + pg_catalog.make_interval(hours => h, mins => m, secs => sec);
            continue when v_local - v_omin <= v_after;
            exit hours when v_best is not null and v_local - v_omax >= v_best;  -- nothing later can be earlier
            if v_o1 = v_o2 then
              v_best := least(v_best, v_local - v_o1);
              exit hours;
            end if;
            -- The day changes offset: L happens at L - v_o1, at L - v_o2 (a repeated time), or at neither (a skipped one).
            v_t1 := v_local - v_o1;
            v_t2 := v_local - v_o2;
            v_ok1 := (v_t1 at time zone 'UTC') at time zone p_tz = v_local;
            v_ok2 := (v_t2 at time zone 'UTC') at time zone p_tz = v_local;
            if not v_ok1 and not v_ok2 then
              v_t1 := (v_local at time zone p_tz) at time zone 'UTC';
              v_ok1 := true;
            elsif v_ok1 and v_ok2 and not p_spec.wildcard_time then  -- a fixed time fires at its first occurrence only
              v_ok1 := v_t1 <= v_t2;
              v_ok2 := not v_ok1;
            end if;
            if v_ok1 and v_t1 > v_after then v_best := least(v_best, v_t1); end if;
            if v_ok2 and v_t2 > v_after then v_best := least(v_best, v_t2); end if;
          end loop;
        end loop;
      end loop;
      if v_best is not null then
        return v_best at time zone 'UTC';
      end if;
    end if;
    v_day := v_day + 1;
  end loop;
  return null;
end;
$$;

comment on function ql.cron_next(ql.cron_spec, text, timestamp with time zone) is
'Returns the fire time; NULL for a NULL argument, an infinite p_after or no fire time within 400 years. Never '
'raises.';
