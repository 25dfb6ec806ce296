-- Revert qinglong:roles from pg
-- Roles are shared by every database of the cluster: drop each one only when nothing else in the
-- cluster still depends on it (another database deployed from the same plan keeps them).
begin;

do $$
declare
  v_role text;
begin
  foreach v_role in array array['ql_readonly', 'ql_scheduler', 'ql_runtime', 'ql_owner'] loop
    begin
      execute pg_catalog.format('drop role if exists %I', v_role);
    exception when dependent_objects_still_exist then
      raise notice 'role % is still used elsewhere in this cluster; kept', v_role;
    end;
  end loop;
end
$$;

commit;
