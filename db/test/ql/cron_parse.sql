-- Tests ql.cron_parse: 5 fields, or 6 with a second first (5 fire at second 0); every field's bounds, lists, ranges, steps, month and day names, 7 as Sunday, the @macros,
-- Vixie cron's day-field flags (a field starting with `*` is unrestricted, `*/2` too) and wildcard_time; every
-- malformed or out-of-range expression is refused as invalid cron with a detail naming the field, and one no date
-- matches as invalid cron_never_fires. A pure function: no table is read or written.
begin;
\ir ../fixtures.psql
\set QUIET 1
select plan(95);

-- A field's values compressed to ranges ("0,15,30,45", "9-17"), or `*` when it holds the whole field.
create function pg_temp.ranges(p_values smallint[], p_lo integer, p_hi integer) returns text language sql
return case when p_values = array(select g::smallint from generate_series(p_lo, p_hi) g) then '*' else
  (select string_agg(case when y.a = y.b then y.a::text else y.a || '-' || y.b end, ',' order by y.a)
     from (select min(x.v) as a, max(x.v) as b
             from (select v, v - row_number() over (order by v) as g from unnest(p_values) v) x group by x.g) y) end;

-- What ql.cron_parse makes of an expression: "minutes | hours | days of month | months | days of week | dom dow time"
-- (dom/dow: restricted or *; time: wildcard or fixed), or "reason: detail" when it refuses.
create function pg_temp.show(p_expr text) returns text language plpgsql as $$
declare
  v record;
begin
  select * into v from ql.cron_parse(p_expr);
  if v.refusal is not null then
    if v.spec is not null or v.refusal ->> 'status' <> 'invalid' then return 'BOTH: ' || v.refusal::text; end if;
    return (v.refusal ->> 'reason') || ': ' || (v.refusal ->> 'detail');
  end if;
  return concat_ws(' | ', pg_temp.ranges((v.spec).minutes, 0, 59), pg_temp.ranges((v.spec).hours, 0, 23),
    pg_temp.ranges((v.spec).days_of_month, 1, 31), pg_temp.ranges((v.spec).months, 1, 12),
    pg_temp.ranges((v.spec).days_of_week, 0, 6),
    case when (v.spec).dom_restricted then 'dom' else 'dom*' end || ' '
    || case when (v.spec).dow_restricted then 'dow' else 'dow*' end || ' '
    || case when (v.spec).wildcard_time then 'wildcard' else 'fixed' end);
end $$;

-- ---------------------------------------------------------------------------------------------
-- Structure.
select has_function('ql', 'cron_parse', array['text'], 'ql.cron_parse(text) exists');
select is((select p.provolatile::text from pg_proc p where p.oid = 'ql.cron_parse(text)'::regprocedure), 's',
  'cron_parse is stable (it casts to the reason enum through ql.outcome)');
select is(pg_get_function_result('ql.cron_parse(text)'::regprocedure), 'record',
  'cron_parse returns a record (spec ql.cron_spec, refusal jsonb)');
select is((select array_agg(a order by a) from unnest((select p.proargnames from pg_proc p
            where p.oid = 'ql.cron_parse(text)'::regprocedure)) a), array['p_expr', 'refusal', 'spec'],
  'its arguments: p_expr in, spec and refusal out');

-- ---------------------------------------------------------------------------------------------
-- 1. Valid expressions.
select is(pg_temp.show('* * * * *'), '* | * | * | * | * | dom* dow* wildcard', 'every minute: every field whole');
select is(pg_temp.show('0 0 * * *'), '0 | 0 | * | * | * | dom* dow* fixed', 'a fixed time every day');
select is(pg_temp.show('*/15 9-17 * * mon-fri'), '0,15,30,45 | 9-17 | * | * | 1-5 | dom* dow wildcard',
  'a step, an hour range and a weekday range by name');
select is(pg_temp.show('1,2,5-7,*/20 * * * *'), '0-2,5-7,20,40 | * | * | * | * | dom* dow* wildcard',
  'a list mixing values, a range and a step');
select is(pg_temp.show('10-30/10 0-23/6 1-31/10 1-12/5 0-6/3'), '10,20,30 | 0,6,12,18 | 1,11,21,31 | 1,6,11 | 0,3,6 | dom dow fixed',
  'a range with a step in every field');
select is(pg_temp.show('0 0 1 1 0'), '0 | 0 | 1 | 1 | 0 | dom dow fixed', 'every field at its lowest value');
select is(pg_temp.show('59 23 31 12 6'), '59 | 23 | 31 | 12 | 6 | dom dow fixed', 'every field at its highest value');
select is(pg_temp.show('0 0 * * 7'), '0 | 0 | * | * | 0 | dom* dow fixed', 'day of week 7 is Sunday, like 0');
select is(pg_temp.show('0 0 * * 0,7'), '0 | 0 | * | * | 0 | dom* dow fixed', '0 and 7 together are one Sunday');
select is(pg_temp.show('0 0 * * 5-7'), '0 | 0 | * | * | 0,5-6 | dom* dow fixed', 'a range up to 7 ends on Sunday');
select is(pg_temp.show('0 0 * jan-mar,DEC sun,Sat'), '0 | 0 | * | 1-3,12 | 0,6 | dom* dow fixed',
  'month and day names, in any case, in ranges and lists');
select is(pg_temp.show('0 0 * * MON-FRI/2'), '0 | 0 | * | * | 1,3,5 | dom* dow fixed', 'a range of day names with a step');
select is(pg_temp.show('0 0 * Jan-Dec Sun-Sat'), '0 | 0 | * | * | * | dom* dow fixed',
  'every month and every day by name is the whole field (but restricted: it does not start with *)');
select is(pg_temp.show(E'  */5\t*   * * *  '), '0,5,10,15,20,25,30,35,40,45,50,55 | * | * | * | * | dom* dow* wildcard',
  'blanks and tabs separate fields, surrounding blanks are ignored');
select is(pg_temp.show('*/60 */24 */31 */12 */8'), '0 | 0 | 1 | 1 | 0 | dom* dow* wildcard',
  'a step as large as its field''s range is accepted and yields the first value');
select is(pg_temp.show('*/59 * * * *'), '0,59 | * | * | * | * | dom* dow* wildcard', 'a step of 59 minutes: 0 and 59');
select is(pg_temp.show('0 0 1-31 * mon'), '0 | 0 | * | * | 1 | dom dow fixed',
  'a day-of-month field 1-31 is restricted (it does not start with *), so it combines with OR');
select is(pg_temp.show('0 0 */2 * mon'), '0 | 0 | 1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31 | * | 1 | dom* dow fixed',
  'Vixie cron: */2 starts with *, so the day-of-month field counts as unrestricted (AND with the weekday)');
select is(pg_temp.show('0 0 * * */2'), '0 | 0 | * | * | 0,2,4,6 | dom* dow* fixed',
  'Vixie cron: */2 in the day-of-week field counts as unrestricted');
select is(pg_temp.show('0 * * * *'), '0 | * | * | * | * | dom* dow* wildcard', 'hourly: the hour field starts with * (wildcard)');
select is(pg_temp.show('* 3 * * *'), '* | 3 | * | * | * | dom* dow* wildcard', 'every minute of 3 a.m.: the minute field starts with *');
select is(pg_temp.show('30 2 * * *'), '30 | 2 | * | * | * | dom* dow* fixed', 'a fixed daily time is not wildcard');
select is(pg_temp.show('0-59 0-23 * * *'), '* | * | * | * | * | dom* dow* fixed',
  'ranges over the whole minute and hour fields are not wildcard (they do not start with *)');
select is(pg_temp.show('00 09 01 01 00'), '0 | 9 | 1 | 1 | 0 | dom dow fixed', 'two-digit values with a leading zero');

-- The macros.
select is(pg_temp.show('@yearly'), pg_temp.show('0 0 1 1 *'), '@yearly is 0 0 1 1 *');
select is(pg_temp.show('@annually'), pg_temp.show('0 0 1 1 *'), '@annually is 0 0 1 1 *');
select is(pg_temp.show('@monthly'), pg_temp.show('0 0 1 * *'), '@monthly is 0 0 1 * *');
select is(pg_temp.show('@weekly'), pg_temp.show('0 0 * * 0'), '@weekly is 0 0 * * 0');
select is(pg_temp.show('@daily'), pg_temp.show('0 0 * * *'), '@daily is 0 0 * * *');
select is(pg_temp.show('@midnight'), pg_temp.show('0 0 * * *'), '@midnight is 0 0 * * *');
select is(pg_temp.show('@hourly'), pg_temp.show('0 * * * *'), '@hourly is 0 * * * *');
select is(pg_temp.show(' @HOURLY '), pg_temp.show('0 * * * *'), 'a macro in any case, with blanks around it');

-- Dates that exist only sometimes, or only with the weekday rule, are accepted.
select is(pg_temp.show('0 0 29 2 *'), '0 | 0 | 29 | 2 | * | dom dow* fixed', 'February 29 fires in leap years: accepted');
select is(pg_temp.show('0 0 31 4,5 *'), '0 | 0 | 31 | 4-5 | * | dom dow* fixed', 'the 31st of April or May: May has one');
select is(pg_temp.show('0 0 30 2 mon'), '0 | 0 | 30 | 2 | 1 | dom dow fixed',
  'February 30 OR a Monday of February: both day fields restricted, so Mondays fire');
select is(pg_temp.show('0 0 */30 2 *'), '0 | 0 | 1,31 | 2 | * | dom* dow* fixed', 'days 1 and 31 of February: the 1st fires');

-- ---------------------------------------------------------------------------------------------
-- 2. Refused: cron_never_fires.
select is(pg_temp.show('0 0 30 2 *'), 'cron_never_fires: no month of the month field has a day of the day-of-month field',
  'February 30 never comes: cron_never_fires');
select is(pg_temp.show('0 0 30,31 2 *'), 'cron_never_fires: no month of the month field has a day of the day-of-month field',
  'February 30 or 31 never comes: cron_never_fires');
select is(pg_temp.show('0 0 31 4,6,9,11 *'), 'cron_never_fires: no month of the month field has a day of the day-of-month field',
  'the 31st of the 30-day months never comes: cron_never_fires');
select is(pg_temp.show('0 0 30 2 */1'), 'cron_never_fires: no month of the month field has a day of the day-of-month field',
  'February 30 AND any weekday (the weekday field starts with *): cron_never_fires');

-- 3. Refused: cron, each with the field and the rule.
select is(pg_temp.show(null), 'cron: the expression is empty', 'NULL is refused');
select is(pg_temp.show(''), 'cron: the expression is empty', 'an empty expression is refused');
select is(pg_temp.show(E' \t '), 'cron: the expression is empty', 'blanks only are refused');
select is(pg_temp.show('* * * *'),
  'cron: 4 fields, expected 5 (minute hour day-of-month month day-of-week) or 6 (second first)', 'four fields');
select is(pg_temp.show('0 * * * * * 2030'),
  'cron: 7 fields, expected 5 (minute hour day-of-month month day-of-week) or 6 (second first)',
  'seven fields (a year field is not supported)');
select is(pg_temp.show('60 * * * *'), 'cron: minute: 60 is out of range 0-59', 'minute 60');
select is(pg_temp.show('* 24 * * *'), 'cron: hour: 24 is out of range 0-23', 'hour 24');
select is(pg_temp.show('* * 0 * *'), 'cron: day-of-month: 0 is out of range 1-31', 'day of month 0');
select is(pg_temp.show('* * 32 * *'), 'cron: day-of-month: 32 is out of range 1-31', 'day of month 32');
select is(pg_temp.show('* * * 0 *'), 'cron: month: 0 is out of range 1-12', 'month 0');
select is(pg_temp.show('* * * 13 *'), 'cron: month: 13 is out of range 1-12', 'month 13');
select is(pg_temp.show('* * * * 8'), 'cron: day-of-week: 8 is out of range 0-7', 'day of week 8');
select is(pg_temp.show('0-60 * * * *'), 'cron: minute: 60 is out of range 0-59', 'a range ending past the field');
select is(pg_temp.show('-1 * * * *'), 'cron: minute: -1 is not *, a value, a range or a step', 'a negative value');
select is(pg_temp.show('1.5 * * * *'), 'cron: minute: 1.5 is not *, a value, a range or a step', 'a fraction');
select is(pg_temp.show('007 * * * *'), 'cron: minute: 007 is not a value of this field', 'three digits');
select is(pg_temp.show('5-1 * * * *'), 'cron: minute: 5-1 is a range that runs backwards', 'a backwards range');
select is(pg_temp.show('* * * * fri-mon'), 'cron: day-of-week: fri-mon is a range that runs backwards',
  'a backwards range of day names (no wrap-around)');
select is(pg_temp.show('*/0 * * * *'), 'cron: minute: step 0 is out of range 1-60', 'step 0');
select is(pg_temp.show('*/61 * * * *'), 'cron: minute: step 61 is out of range 1-60', 'a step past the minute field');
select is(pg_temp.show('* */25 * * *'), 'cron: hour: step 25 is out of range 1-24', 'a step past the hour field');
select is(pg_temp.show('* * * */13 *'), 'cron: month: step 13 is out of range 1-12', 'a step past the month field');
select is(pg_temp.show('* * * * */9'), 'cron: day-of-week: step 9 is out of range 1-8', 'a step past the day-of-week field');
select is(pg_temp.show('*/100 * * * *'), 'cron: minute: step 100 is out of range 1-60', 'a three-digit step');
select is(pg_temp.show('5/10 * * * *'), 'cron: minute: 5/10: a step follows * or a range, not a single value',
  'a step after a single value (as in Vixie cron)');
select is(pg_temp.show('*/ * * * *'), 'cron: minute: */ is not *, a value, a range or a step', 'a step without a number');
select is(pg_temp.show('1,,2 * * * *'), 'cron: minute: an empty item is not *, a value, a range or a step', 'an empty list item');
select is(pg_temp.show('1, * * * *'), 'cron: minute: an empty item is not *, a value, a range or a step', 'a trailing comma');
select is(pg_temp.show('*-5 * * * *'), 'cron: minute: *-5 is not *, a value, a range or a step', 'a range starting at *');
select is(pg_temp.show('? * * * *'), 'cron: minute: ? is not *, a value, a range or a step', 'Quartz''s ?');
select is(pg_temp.show('* * L * *'), 'cron: day-of-month: l is not a value of this field', 'Quartz''s L');
select is(pg_temp.show('* * * * 5#2'), 'cron: day-of-week: 5#2 is not *, a value, a range or a step', 'Quartz''s #');
select is(pg_temp.show('jan * * * *'), 'cron: minute: jan is not a value of this field', 'a month name in the minute field');
select is(pg_temp.show('* * * mon *'), 'cron: month: mon is not a value of this field', 'a day name in the month field');
select is(pg_temp.show('* * * * jan'), 'cron: day-of-week: jan is not a value of this field', 'a month name in the day-of-week field');
select is(pg_temp.show('* * * * monday'), 'cron: day-of-week: monday is not a value of this field', 'a full day name');
select is(pg_temp.show('@reboot'),
  'cron: unknown macro @reboot (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)', '@reboot is refused');
select is(pg_temp.show('@every 5m'),
  'cron: unknown macro @every 5m (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)', '@every is refused');
select is(pg_temp.show(repeat('1,', 100) || '1 * * * *'), 'cron: the expression is longer than 200 characters',
  'an expression over 200 characters');
select is(pg_temp.show(E'*\n* * * *'), 'cron: 4 fields, expected 5 (minute hour day-of-month month day-of-week) or 6 (second first)',
  'a line break does not separate fields');
select is(pg_temp.show('* * * * * '), '* | * | * | * | * | dom* dow* wildcard', 'a trailing blank is not a sixth field');

-- The refusal is ql.outcome's shape plus the detail, and never comes with a spec.
select is((ql.cron_parse('61 * * * *')).refusal,
  '{"status": "invalid", "reason": "cron", "detail": "minute: 61 is out of range 0-59"}'::jsonb,
  'a refusal is {"status": "invalid", "reason": "cron", "detail": …}');
select ok((ql.cron_parse('61 * * * *')).spec is null and (ql.cron_parse('* * * * *')).refusal is null,
  'a refusal has no spec, a spec has no refusal');

-- 6 fields: a second (0-59) first, as the Qinglong panel writes them; 5 fields fire at second 0.
create function pg_temp.seconds(p_expr text) returns text language sql
return pg_temp.ranges(((ql.cron_parse(p_expr)).spec).seconds, 0, 59);
select is(pg_temp.seconds('* * * * *'), '0', 'five fields fire at second 0');
select is(pg_temp.show('30 */15 9-17 * * mon-fri'), pg_temp.show('*/15 9-17 * * mon-fri'),
  'six fields: the last five read as the five fields do');
select is(pg_temp.seconds('30 */15 9-17 * * mon-fri'), '30', 'six fields: the first is the second');
select is(pg_temp.seconds('*/15 * * * * *'), '0,15,30,45', 'a step over the seconds');
select is(pg_temp.seconds('5,10-12 * * * * *'), '5,10-12', 'a list and a range of seconds');
select is(pg_temp.show('* 0 0 * * *'), '0 | 0 | * | * | * | dom* dow* wildcard',
  'a second field starting with * makes the time a wildcard (both occurrences of a repeated local time)');
select is(pg_temp.show('60 * * * * *'), 'cron: second: 60 is out of range 0-59', 'second 60');
select is(pg_temp.show('*/0 * * * * *'), 'cron: second: step 0 is out of range 1-60', 'a second step of 0');

select * from finish();
rollback;
