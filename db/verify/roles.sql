-- Verify qinglong:roles on pg
select 1 / pg_catalog.count(*)::int
from pg_catalog.pg_roles
where (rolname = 'ql_owner' and not rolcanlogin)
   or (rolname = 'ql_runtime' and rolcanlogin and not rolsuper)
   or (rolname = 'ql_scheduler' and rolcanlogin and not rolsuper)
   or (rolname = 'ql_readonly' and not rolcanlogin)
having pg_catalog.count(*) = 4;
