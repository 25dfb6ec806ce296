-- Deploy qinglong:ql/unique_names to pg
-- FROZEN COPY of db/schema/ql/unique_names.sql, written by scripts/sync_functions.py.
-- Edit that file and re-run the script; never edit this one.
-- Subject names and Worker names are unique, as Project names are: the operator commands name them
-- (`subject disable alice`, `worker disable edge-1`), so a name is one subject or one Worker. Exact
-- (case-sensitive) comparison, like ql.projects.name. ql_api.subject_create_v1 and ql_api.worker_enroll_v1
-- answer a name another one holds with {"status":"fenced","reason":"name_taken"} (appended to
-- ql.fence_reason, whose order qinglong.wire.errors.FENCE_REASONS mirrors) instead of raising.
-- A database that already holds two subjects (or two Workers) of one name cannot take this change: the
-- deploy STOPS, before creating anything, with an error naming the duplicated names. Rename all but one of
-- each (an UPDATE of ql.subjects.name or ql.workers.name as the DBA), then deploy again.
begin;
set local role ql_owner;

-- The ALTERs below need ACCESS EXCLUSIVE: take it before the check reads, so no lock is ever upgraded.
lock table ql.subjects, ql.workers in access exclusive mode;

do $$
declare
  v_subjects text;
  v_workers text;
begin
  select string_agg(format('%L (%s)', d.name, d.n), ', ' order by d.name) into v_subjects
    from (select s.name, count(*) as n from ql.subjects s group by s.name having count(*) > 1) d;
  select string_agg(format('%L (%s)', d.name, d.n), ', ' order by d.name) into v_workers
    from (select w.name, count(*) as n from ql.workers w group by w.name having count(*) > 1) d;
  if v_subjects is not null or v_workers is not null then
    raise exception using errcode = '23505',
      message = format('ql/unique_names: names are not unique: subjects %s; Workers %s',
                       coalesce(v_subjects, 'none'), coalesce(v_workers, 'none')),
      hint = 'Rename all but one of each (UPDATE ql.subjects / ql.workers SET name = ... WHERE id = ...), then deploy again.';
  end if;
end
$$;

alter table ql.subjects add constraint subjects_name_key unique (name);
alter table ql.workers add constraint workers_name_key unique (name);
alter type ql.fence_reason add value if not exists 'name_taken';

commit;
