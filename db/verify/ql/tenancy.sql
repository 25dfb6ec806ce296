-- Verify qinglong:ql/tenancy on pg
select id, name, status, version, created_at_ms from ql.projects where false;
select id, kind, name, token_digest, status, created_at_ms from ql.subjects where false;
select project_id, subject_id, role, version, active from ql.role_bindings where false;
