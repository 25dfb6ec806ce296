-- Verify qinglong:ql/audit on pg
select id, at_ms, subject_id, worker_id, route, project_id, permission, decision, reason, request_id
from ql.security_audit where false;
select subject_id, mutation_id, command_digest, result, created_at_ms from ql.mutations where false;
