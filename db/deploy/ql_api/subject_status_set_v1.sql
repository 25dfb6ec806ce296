-- Deploy qinglong:ql_api/subject_status_set_v1 to pg
-- FROZEN COPY of db/functions/ql_api/subject_status_set_v1.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
begin;
set local role ql_owner;

-- ql_api.subject_status_set_v1: disable or enable a subject of the user API, named by its id or its name.
create or replace function ql_api.subject_status_set_v1(p_subject text, p_active boolean)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
as $$
-- A disabled subject is denied at admission (auth.subject_disabled, ql_api.request_admission_v1) and every
-- admission it already holds is fenced (subject_disabled, ql.policy_fence). Setting the status it already has
-- changes nothing.
declare
  v_id uuid;
  v_matches integer;
  v_wanted text := case when p_active then 'active' else 'disabled' end;
  v_answer text := case when p_active then 'enabled' else 'disabled' end;
  v_subject ql.subjects;
begin
  if p_subject is null or length(p_subject) not between 1 and 200 then return ql.outcome('invalid', 'name'); end if;
  if p_active is null then return ql.outcome('invalid', 'active'); end if;
  if p_subject ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' then v_id := p_subject::uuid; end if;
  select count(*), min(s.id::text)::uuid into v_matches, v_id
    from ql.subjects s where (s.id = v_id or s.name = p_subject) and s.kind <> 'system';
  if v_matches = 0 then return ql.outcome('not_found', 'subject'); end if;
  if v_matches > 1 then
    return ql.outcome('invalid', 'name')
      || jsonb_build_object('detail', format('%s subjects match %L: name one by its id', v_matches, p_subject));
  end if;

  select * into v_subject from ql.subjects s where s.id = v_id for no key update;
  if v_subject.status <> v_wanted then
    update ql.subjects s set status = v_wanted where s.id = v_id;
  end if;
  return jsonb_build_object('status', v_answer, 'subjectId', v_id,
    'name', v_subject.name, 'changed', v_subject.status <> v_wanted);
end;
$$;

comment on function ql_api.subject_status_set_v1(text, boolean) is
'Returns disabled | enabled {subjectId, name, changed} | invalid (name, active) | not_found (subject). Raises '
'nothing on input.';

commit;
