-- ql.timezone_is_valid: whether a text names a time zone a schedule may use.
create or replace function ql.timezone_is_valid(p_timezone text)
returns boolean
language sql
stable
-- An IANA zone name exactly as pg_timezone_names lists it, but not the posix/ and right/ copies nor Factory, localtime
-- or posixrules. The one check of ql_api.task_schedule_set_v1 and ql_api.schedule_preview_v1.
-- Stable: the result depends on the time zone database.
return p_timezone is not null and p_timezone !~ '^(posix|right)/'
       and p_timezone not in ('Factory', 'localtime', 'posixrules')
       and exists (select 1 from pg_catalog.pg_timezone_names z where z.name = p_timezone);

comment on function ql.timezone_is_valid(text) is
'Returns true for an IANA zone name a schedule may use, false otherwise (NULL included). Never raises.';
