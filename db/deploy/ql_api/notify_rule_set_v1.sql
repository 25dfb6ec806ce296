-- Deploy qinglong:ql_api/notify_rule_set_v1 to pg
-- FROZEN COPY of db/functions/ql_api/notify_rule_set_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.notify_rule_set_v1: create or replace a Project's notification rule by name (operators: run.start).
-- Lock order: project (FOR SHARE, ql.policy_fence) → the rule (the upsert's row lock).
create or replace function ql_api.notify_rule_set_v1(
  p_subject_id uuid,
  p_project_id uuid,
  p_name text,
  p_events text[],
  p_channel text,
  p_url text,
  p_secret_name text,
  p_template text,
  p_admitted_project_version bigint,
  p_admitted_binding_version bigint
)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- A rule names its events, its channel and the Project secret that keys it, never a value: webhook (p_url, http or
-- https; the secret is the HMAC-SHA256 key of the signature) or wecom (no URL: the dispatcher's configured robot
-- endpoint; the secret is the robot's key). A URL that carries credentials (user:password@, or a query parameter
-- named key, token, access_token, secret, sign or signature) is refused: a credential belongs in a secret. The
-- secret must exist in the Project now (not_found secret); deleting it later fails deliveries
-- (secret_unavailable) until it is set again. Setting a rule with the same content again answers unchanged;
-- another content replaces it (updated), keeping its id. Pending notifications of the rule are delivered with
-- the content current when they are claimed.
declare
  v_fence jsonb;
  v_rule ql.notify_rules;
  v_now bigint;
  v_status text;
begin
  if p_subject_id is null then return ql.outcome('invalid', 'subject_id'); end if;
  if p_project_id is null then return ql.outcome('invalid', 'project_id'); end if;
  if p_name is null or p_name !~ '^[a-z0-9][a-z0-9._-]{0,63}$' then return ql.outcome('invalid', 'name'); end if;
  if p_events is null or cardinality(p_events) not between 1 and 7 or array_position(p_events, null) is not null
     or not p_events <@ array['run.failed', 'run.timed_out', 'run.cancelled', 'run.succeeded_after_failure',
                              'run.lost', 'worker.offline', 'schedule.skipped']
     or (select count(distinct e) from unnest(p_events) e) <> cardinality(p_events) then
    return ql.outcome('invalid', 'events');
  end if;
  if p_channel is null or p_channel not in ('webhook', 'wecom') then return ql.outcome('invalid', 'channel'); end if;
  if (p_channel = 'webhook') <> (p_url is not null)
     or (p_url is not null and (length(p_url) not between 10 and 2048
         or p_url !~ '^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[!-~]*)?$'
         or p_url ~* '[?&](key|token|access_token|secret|sign|signature)=')) then
    return ql.outcome('invalid', 'url');
  end if;
  if p_secret_name is null or p_secret_name !~ '^[A-Z_][A-Z0-9_]{0,63}$' then
    return ql.outcome('invalid', 'secret_name');
  end if;
  if p_template is not null and (length(p_template) not between 1 and 2000 or p_channel <> 'wecom') then
    return ql.outcome('invalid', 'template');
  end if;
  if p_admitted_project_version is null or p_admitted_binding_version is null then
    return ql.outcome('invalid', 'admitted_version');
  end if;

  v_fence := ql.policy_fence(p_subject_id, p_project_id, 'run.start', p_admitted_project_version,
                             p_admitted_binding_version);
  if v_fence is not null then return v_fence; end if;
  if not exists (select from ql.secrets s where s.project_id = p_project_id and s.name = p_secret_name
                                            and s.current_version > 0) then
    return ql.outcome('not_found', 'secret');
  end if;

  v_now := ql.now_ms();
  select * into v_rule from ql.notify_rules r
   where r.project_id = p_project_id and r.name = p_name and r.removed_at_ms is null for update;
  if v_rule.id is null then
    insert into ql.notify_rules (project_id, name, events, channel, url, secret_name, template, created_by,
                                 created_at_ms, updated_at_ms)
    values (p_project_id, p_name, p_events, p_channel, p_url, p_secret_name, p_template, p_subject_id, v_now, v_now)
    returning * into v_rule;
    v_status := 'created';
  elsif v_rule.events = p_events and v_rule.channel = p_channel and v_rule.url is not distinct from p_url
        and v_rule.secret_name = p_secret_name and v_rule.template is not distinct from p_template then
    v_status := 'unchanged';
  else
    update ql.notify_rules r
       set events = p_events, channel = p_channel, url = p_url, secret_name = p_secret_name, template = p_template,
           updated_at_ms = v_now
     where r.id = v_rule.id
    returning * into v_rule;
    v_status := 'updated';
  end if;
  return jsonb_build_object('status', v_status, 'ruleId', v_rule.id, 'name', v_rule.name);
end;
$$;

comment on function ql_api.notify_rule_set_v1(uuid, uuid, text, text[], text, text, text, text, bigint, bigint) is
'Returns created | updated | unchanged {ruleId, name} | invalid (subject_id, project_id, name, events, channel, url, '
'secret_name, template, admitted_version) | not_found (project, secret) | fenced (ql.policy_fence reasons). Raises '
'nothing on input.';
grant execute on function ql_api.notify_rule_set_v1(uuid, uuid, text, text[], text, text, text, text, bigint, bigint)
  to ql_runtime;

commit;
