-- ql_api.schedule_preview_v1: the next fire times a cron expression would have in a time zone, from now. Reads only.
create or replace function ql_api.schedule_preview_v1(p_cron text, p_timezone text, p_count integer default 5)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- For a client that edits a schedule (the web console, `qinglong task schedule preview`): the same parse
-- (ql.cron_parse, 5 or 6 fields), the same zone check (ql.timezone_is_valid) and the same next-fire rule
-- (ql.cron_next, through ql.schedule_fires_ahead) as ql_api.task_schedule_set_v1 and the scheduler, so the preview
-- is what the schedule would do, and a refusal is the one a set would answer (with its detail). Each fire time is
-- given in ms and as an ISO 8601 local time with its UTC offset in p_timezone (ql.local_iso). Touches no table
-- (volatile only because ql.now_ms, the control plane's clock, is).
declare
  v_cron text := pg_catalog.btrim(p_cron, E' \t');
  v_parsed record;
  v_first timestamptz;
  v_fires jsonb;
begin
  if p_cron is null then return ql.outcome('invalid', 'cron'); end if;
  select * into v_parsed from ql.cron_parse(v_cron);
  if v_parsed.refusal is not null then return v_parsed.refusal; end if;
  if not ql.timezone_is_valid(p_timezone) then return ql.outcome('invalid', 'timezone'); end if;
  if p_count is null or p_count not between 1 and 20 then return ql.outcome('invalid', 'limit'); end if;
  v_first := ql.cron_next(v_parsed.spec, p_timezone, pg_catalog.to_timestamp(ql.now_ms() / 1000.0));
  select coalesce(jsonb_agg(jsonb_build_object(
           'atMs', f.at_ms, 'local', ql.local_iso(pg_catalog.to_timestamp(f.at_ms / 1000.0), p_timezone))
           order by f.n), '[]')
    into v_fires
    from pg_catalog.unnest(ql.schedule_fires_ahead(v_cron, p_timezone, (extract(epoch from v_first) * 1000)::bigint,
                                                   p_count)) with ordinality f(at_ms, n);
  return jsonb_build_object('status', 'previewed', 'cron', v_cron, 'timezone', p_timezone, 'fires', v_fires);
end;
$$;

comment on function ql_api.schedule_preview_v1(text, text, integer) is
'Returns previewed {cron, timezone, fires: [{atMs, local}]} | invalid (cron, cron_never_fires, timezone, limit; '
'a cron refusal with a detail). Raises nothing on input.';
grant execute on function ql_api.schedule_preview_v1(text, text, integer) to ql_runtime;
