-- Revert qinglong:ql/plan_secret_names from pg
begin;
set local role ql_owner;
drop function ql.plan_secret_names(jsonb);
commit;
