-- Deploy qinglong:ql/cron_spec to pg
-- FROZEN COPY of db/schema/ql/cron_spec.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- The parsed form of a 5- or 6-field cron expression: ql.cron_parse writes it, ql.cron_next reads it. A value
-- type only; no table stores it (ql.task_schedules keeps the expression's text, parsed again at each fire).
begin;
set local role ql_owner;

create type ql.cron_spec as (
  seconds smallint[],        -- each field's matching values, ascending: 0-59 ({0} for a 5-field expression)
  minutes smallint[],        -- 0-59
  hours smallint[],          -- 0-23
  days_of_month smallint[],  -- 1-31
  months smallint[],         -- 1-12
  days_of_week smallint[],   -- 0-6, 0 = Sunday
  dom_restricted boolean,    -- the day-of-month field does not start with `*`
  dow_restricted boolean,    -- the day-of-week field does not start with `*`
  wildcard_time boolean      -- the second, minute or hour field starts with `*`
);
comment on type ql.cron_spec is
'A parsed cron expression (ql.cron_parse). A day matches when both day fields are restricted and either matches '
'(Vixie cron''s OR), else when both match. wildcard_time: fire at both occurrences of a repeated local time.';

commit;
