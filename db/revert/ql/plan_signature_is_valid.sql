-- Revert qinglong:ql/plan_signature_is_valid from pg
begin;
set local role ql_owner;
drop function ql.plan_signature_is_valid(jsonb);
commit;
