-- Revert qinglong:schemas from pg
begin;

alter default privileges for role ql_owner grant execute on functions to public;
drop schema ql_api;
drop schema ql;

commit;
