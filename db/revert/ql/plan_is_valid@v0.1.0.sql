-- Revert qinglong:ql/plan_is_valid from pg
begin;
set local role ql_owner;
drop function ql.plan_is_valid(jsonb);
commit;
