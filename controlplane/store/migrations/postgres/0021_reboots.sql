-- 0021_reboots: the Rebooting host state (rfcs/0004), in flight like
-- Activating, and each rollout's reboot step (rfcs/0003 rule 17), which
-- a host's assignment carries (reconciler.Assignment.Reboot): '' for a
-- rollout that orders no reboot, else the JSON of store.rebootColumn,
-- written when the rollout opens. Rollouts kept before ordered none.
ALTER TABLE rollout_hosts DROP CONSTRAINT rollout_hosts_state;
ALTER TABLE rollout_hosts ADD CONSTRAINT rollout_hosts_state CHECK (state IN ('Pending', 'Activating', 'Soaking', 'Converged', 'Failed', 'Reverted', 'Deferred', 'Skipped', 'RollingBack', 'Rebooting'));
DROP INDEX rollout_hosts_in_flight;
CREATE INDEX rollout_hosts_in_flight ON rollout_hosts (rollout_id) WHERE state IN ('Activating', 'Soaking', 'RollingBack', 'Rebooting');
ALTER TABLE rollouts ADD COLUMN reboot TEXT NOT NULL DEFAULT '';
