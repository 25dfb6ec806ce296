-- Verify qinglong:ql/current_attempt_unchecked on pg
select 1 / (not exists (select from pg_catalog.pg_constraint c
                         where c.conrelid = 'ql.runs'::regclass and c.conname = 'runs_current_attempt_id_fkey'))::int;
