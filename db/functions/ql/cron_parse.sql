-- ql.cron_parse: parse and validate a 5- or 6-field cron expression into ql.cron_spec (what ql.cron_next reads).
create or replace function ql.cron_parse(p_expr text, out spec ql.cron_spec, out refusal jsonb)
language plpgsql
stable
parallel safe
as $$
-- Fields, separated by blanks: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or jan-dec), day of
-- week (0-7 or sun-sat; 0 and 7 are Sunday); six fields put a second (0-59) first, as the Qinglong panel does
-- (five fields fire at second 0). Each field is a comma list of items: `*`, a value `a`, a range `a-b`
-- (a <= b), and `*/n` or `a-b/n` with a step n from 1 to the size of the field's range. Names are accepted
-- wherever a value is, in any case. The macros @yearly (@annually), @monthly, @weekly, @daily (@midnight) and
-- @hourly stand for their classic expressions; @reboot and anything else is refused.
-- Vixie cron semantics for the two day fields: when both are restricted they combine with OR (either matches),
-- otherwise with AND; a field counts as unrestricted when it starts with `*` (so `*/2` too), as in Vixie cron.
-- wildcard_time: the second, minute or hour field starts with `*` (ql.cron_next fires such an expression at both
-- occurrences of a repeated local time).
-- An expression no date can match (day 30 or 31 of February only, day 31 of 30-day months only) is refused as
-- cron_never_fires, so ql.cron_next always finds a next fire time for a parsed expression.
-- "detail" naming the field and the rule (the expression is an operator's input, never a secret).
-- Stable (not immutable) only because ql.outcome casts to the reason enum.
declare
  c_names constant text[] := array['second', 'minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
  c_min constant integer[] := array[0, 0, 0, 1, 1, 0];
  c_max constant integer[] := array[59, 59, 23, 31, 12, 7];
  c_months constant text[] := array['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
  c_days constant text[] := array['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
  c_month_days constant integer[] := array[31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  v_expr text;
  v_fields text[];
  v_item text;
  v_match text[];
  v_bounds integer[];
  v_token text;
  v_value integer;
  v_lo integer;
  v_hi integer;
  v_step integer;
  v_hit boolean[];
  v_set smallint[];
  v_seconds smallint[];
  v_minutes smallint[];
  v_hours smallint[];
  v_doms smallint[];
  v_months smallint[];
  v_dows smallint[];
  v_detail text;
begin
  v_expr := pg_catalog.lower(pg_catalog.btrim(coalesce(p_expr, ''), E' \t'));
  v_expr := case v_expr
    when '@yearly' then '0 0 1 1 *' when '@annually' then '0 0 1 1 *' when '@monthly' then '0 0 1 * *'
    when '@weekly' then '0 0 * * 0' when '@daily' then '0 0 * * *' when '@midnight' then '0 0 * * *'
    when '@hourly' then '0 * * * *' else v_expr end;
  if v_expr = '' then
    v_detail := 'the expression is empty';
  elsif pg_catalog.length(v_expr) > 200 then
    v_detail := 'the expression is longer than 200 characters';
  elsif v_expr like '@%' then
    v_detail := pg_catalog.format('unknown macro %s (@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)',
                                  v_expr);
  else
    v_fields := pg_catalog.regexp_split_to_array(v_expr, E'[ \t]+');
    if pg_catalog.cardinality(v_fields) not in (5, 6) then
      v_detail := pg_catalog.format('%s fields, expected 5 (minute hour day-of-month month day-of-week) or 6 '
                                    '(second first)', pg_catalog.cardinality(v_fields));
    elsif pg_catalog.cardinality(v_fields) = 5 then
      v_fields := array['0'] || v_fields;  -- second 0
    end if;
  end if;

  if v_detail is null then
    <<fields>>
    for i in 1..6 loop
      v_hit := pg_catalog.array_fill(false, array[c_max[i] + 1], array[0]);
      foreach v_item in array pg_catalog.string_to_array(v_fields[i], ',') loop
        -- `*`, `a`, `a-b`, each optionally followed by `/n` (not after a single value, as in Vixie cron)
        v_match := pg_catalog.regexp_match(v_item, '^(?:(\*)|([a-z0-9]+)(?:-([a-z0-9]+))?)(?:/([0-9]+))?$');
        if v_match is null then
          v_detail := pg_catalog.format('%s: %s is not *, a value, a range or a step', c_names[i],
                                        coalesce(nullif(v_item, ''), 'an empty item'));
          exit fields;
        end if;
        if v_match[2] is not null and v_match[3] is null and v_match[4] is not null then
          v_detail := pg_catalog.format('%s: %s: a step follows * or a range, not a single value', c_names[i], v_item);
          exit fields;
        end if;
        v_bounds := array[]::integer[];
        foreach v_token in array array[v_match[2], v_match[3]] loop
          continue when v_token is null;
          v_value := case
            when v_token ~ '^[0-9]{1,2}$' then v_token::integer
            when i = 5 then pg_catalog.array_position(c_months, v_token)
            when i = 6 then pg_catalog.array_position(c_days, v_token) - 1
          end;
          if v_value is null then
            v_detail := pg_catalog.format('%s: %s is not a value of this field', c_names[i], v_token);
            exit fields;
          end if;
          if v_value not between c_min[i] and c_max[i] then
            v_detail := pg_catalog.format('%s: %s is out of range %s-%s', c_names[i], v_token, c_min[i], c_max[i]);
            exit fields;
          end if;
          v_bounds := v_bounds || v_value;
        end loop;
        if v_match[1] is not null then
          v_lo := c_min[i];
          v_hi := c_max[i];
        else
          v_lo := v_bounds[1];
          v_hi := v_bounds[pg_catalog.cardinality(v_bounds)];
        end if;
        if v_lo > v_hi then
          v_detail := pg_catalog.format('%s: %s is a range that runs backwards', c_names[i], v_item);
          exit fields;
        end if;
        v_step := 1;
        if v_match[4] is not null then
          v_step := case when v_match[4] ~ '^[0-9]{1,2}$' then v_match[4]::integer end;
          if v_step is null or v_step not between 1 and c_max[i] - c_min[i] + 1 then
            v_detail := pg_catalog.format('%s: step %s is out of range 1-%s', c_names[i], v_match[4],
                                          c_max[i] - c_min[i] + 1);
            exit fields;
          end if;
        end if;
        for v in v_lo..v_hi by v_step loop
          v_hit[v] := true;
        end loop;
      end loop;
      v_set := array(select g::smallint from pg_catalog.generate_series(c_min[i], c_max[i]) g where v_hit[g]);
      case i
        when 1 then v_seconds := v_set;
        when 2 then v_minutes := v_set;
        when 3 then v_hours := v_set;
        when 4 then v_doms := v_set;
        when 5 then v_months := v_set;
        else  -- day of week: 7 is Sunday, like 0
          v_dows := array(select distinct (g % 7)::smallint from pg_catalog.unnest(v_set) g order by 1);
      end case;
    end loop;
  end if;

  if v_detail is not null then
    refusal := ql.outcome('invalid', 'cron') || pg_catalog.jsonb_build_object('detail', v_detail);
    return;
  end if;
  -- With AND, the day-of-week field cannot rescue a day-of-month no selected month has (every date falls on
  -- every weekday in some year); with OR, any selected weekday fires.
  if not (v_fields[4] !~ '^\*' and v_fields[6] !~ '^\*')
     and not exists (select 1 from pg_catalog.unnest(v_months) m, pg_catalog.unnest(v_doms) d
                      where d <= c_month_days[m]) then
    refusal := ql.outcome('invalid', 'cron_never_fires') || pg_catalog.jsonb_build_object('detail',
      'no month of the month field has a day of the day-of-month field');
    return;
  end if;
  spec := row(v_seconds, v_minutes, v_hours, v_doms, v_months, v_dows, v_fields[4] !~ '^\*', v_fields[6] !~ '^\*',
              v_fields[1] ~ '^\*' or v_fields[2] ~ '^\*' or v_fields[3] ~ '^\*')::ql.cron_spec;
end;
$$;

comment on function ql.cron_parse(text) is
'Returns (spec, NULL), or (NULL, refusal) with refusal invalid (cron, cron_never_fires) and a detail naming the '
'field and the rule. Never raises.';
