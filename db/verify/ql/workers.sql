-- Verify qinglong:ql/workers on pg
select id, name, generation, pool, cert_fingerprint, status from ql.workers where false;
select id, worker_id, worker_generation, status, capacity, opened_at_ms, expires_at_ms, ended_at_ms
from ql.worker_sessions where false;
