-- ql.plan_secret_names: the distinct secret names a plan refers to (secretEnv and secretFiles values), sorted.
create or replace function ql.plan_secret_names(p_plan jsonb)
returns text[]
language plpgsql
immutable
strict
parallel safe
as $$
-- PL/pgSQL, not SQL: a SQL function with a sub-select is not inlined, and its body was planned again on every call
-- (about 100 µs of a starting ACK); PL/pgSQL plans it once per session.
begin
  return (select coalesce(pg_catalog.array_agg(distinct v order by v), '{}')
            from (select e.value as v from pg_catalog.jsonb_each_text(coalesce(p_plan -> 'secretEnv', '{}')) e
                  union all
                  select f.value from pg_catalog.jsonb_each_text(coalesce(p_plan -> 'secretFiles', '{}')) f) s);
end;
$$;

comment on function ql.plan_secret_names(jsonb) is
'Returns the sorted distinct secret names of a valid plan''s secretEnv and secretFiles ({} when it names none). '
'Never raises on a valid plan.';
