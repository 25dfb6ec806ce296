-- Verify qinglong:ql/unique_names on pg
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_constraint c
where c.contype = 'u' and ((c.conrelid = 'ql.subjects'::regclass and c.conname = 'subjects_name_key')
                        or (c.conrelid = 'ql.workers'::regclass and c.conname = 'workers_name_key'))
having pg_catalog.count(*) = 2;
select 1 / pg_catalog.count(*)::int from pg_catalog.pg_enum e
where e.enumtypid = 'ql.fence_reason'::regtype and e.enumlabel = 'name_taken';
