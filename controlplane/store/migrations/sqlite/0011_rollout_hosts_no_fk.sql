-- 0011_rollout_hosts_no_fk: PostgreSQL drops the foreign key of
-- rollout_hosts (its check cost a trigger a row). SQLite checks one with
-- an index lookup, and dropping it means rebuilding the table: it stays.
-- Prune deletes a rollout's hosts with it on both backends.
SELECT 1;
