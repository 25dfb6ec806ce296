-- Deploy qinglong:ql_api/notify_result_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_result_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_result_v1: record one delivery attempt of a claimed notification and decide what follows (ql_notify).
-- Lock order: the outbox row (FOR UPDATE) → its delivery row (insert).
create or replace function ql_api.notify_result_v1(
  p_outbox_id uuid,
  p_attempt_no integer,
  p_ok boolean,
  p_status_code integer,
  p_error text,
  p_duration_ms integer
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- The attempt is recorded once (a replay of the same attempt number answers duplicate and changes nothing). Then:
-- ok → delivered (whichever claim it was: delivered is delivered); a failure of the current claim → dead when
-- ql.settings.notify_max_attempts are spent, else pending again at database time + min(cap, base × 2^(attempt−1))
-- (notify_backoff_base_ms, notify_backoff_cap_ms), durable in next_attempt_at_ms; a failure of an older claim
-- (its lease passed and another claim followed) or of an ended row changes nothing more. p_error is a stable code
-- ([a-z0-9_.:], at most 64): never a URL, a body or a value.
declare
  v_row ql.notify_outbox;
  v_settings ql.settings;
  v_now bigint;
  v_next bigint;
begin
  if p_outbox_id is null then return ql.outcome('invalid', 'outbox_id'); end if;
  if p_attempt_no is null or p_attempt_no < 1 then return ql.outcome('invalid', 'attempt_no'); end if;
  if p_ok is null then return ql.outcome('invalid', 'status'); end if;
  if p_status_code is not null and p_status_code not between 100 and 599 then
    return ql.outcome('invalid', 'status_code');
  end if;
  if (p_error is not null and p_error !~ '^[a-z0-9_.:]{1,64}$') or (p_ok and p_error is not null)
     or (not p_ok and p_error is null and p_status_code is null) then
    return ql.outcome('invalid', 'error');
  end if;
  if p_duration_ms is null or p_duration_ms not between 0 and 3600000 then
    return ql.outcome('invalid', 'duration_ms');
  end if;

  select * into v_row from ql.notify_outbox o where o.id = p_outbox_id for update;
  if v_row.id is null then return ql.outcome('not_found', 'notification'); end if;
  if p_attempt_no > v_row.attempts then return ql.outcome('invalid', 'attempt_no'); end if;
  v_now := ql.now_ms();
  insert into ql.notify_deliveries (outbox_id, attempt_no, ok, status_code, error, duration_ms, at_ms)
  values (p_outbox_id, p_attempt_no, p_ok, p_status_code, p_error, p_duration_ms, v_now)
  on conflict (outbox_id, attempt_no) do nothing;
  if not found then return jsonb_build_object('status', 'duplicate', 'state', v_row.state); end if;

  if v_row.state <> 'pending' then
    return jsonb_build_object('status', 'ended', 'state', v_row.state);
  elsif p_ok then
    update ql.notify_outbox o set state = 'delivered', ended_at_ms = v_now where o.id = p_outbox_id;
    return jsonb_build_object('status', 'delivered', 'state', 'delivered');
  elsif p_attempt_no <> v_row.attempts then
    return jsonb_build_object('status', 'stale', 'state', v_row.state);
  end if;
  select * into v_settings from ql.settings;
  if v_row.attempts >= v_settings.notify_max_attempts then
    update ql.notify_outbox o set state = 'dead', ended_at_ms = v_now where o.id = p_outbox_id;
    return jsonb_build_object('status', 'dead', 'state', 'dead');
  end if;
  v_next := v_now + least(v_settings.notify_backoff_cap_ms,
                          v_settings.notify_backoff_base_ms * power(2, least(v_row.attempts - 1, 40))::bigint);
  update ql.notify_outbox o set next_attempt_at_ms = v_next where o.id = p_outbox_id;
  return jsonb_build_object('status', 'retry', 'state', 'pending', 'nextAttemptAtMs', v_next);
end;
$$;

comment on function ql_api.notify_result_v1(uuid, integer, boolean, integer, text, integer) is
'Returns delivered | retry {nextAttemptAtMs} | dead | stale | ended | duplicate, each with {state} | invalid '
'(outbox_id, attempt_no, status, status_code, error, duration_ms) | not_found (notification). Raises nothing on input.';
grant execute on function ql_api.notify_result_v1(uuid, integer, boolean, integer, text, integer) to ql_notify;

commit;
