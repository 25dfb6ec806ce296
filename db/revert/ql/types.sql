-- Revert qinglong:ql/types from pg
begin;
drop domain ql.sha256;
drop domain ql.ms;
drop domain ql.actor_kind;
drop domain ql.cancel_reason;
drop domain ql.attempt_status;
drop domain ql.run_status;
commit;
