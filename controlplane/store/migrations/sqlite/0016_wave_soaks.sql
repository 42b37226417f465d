-- 0016_wave_soaks: each wave's soak in minutes, in wave order, comma
-- separated ("10,10,0"; '' for a rollout without waves), written when the
-- rollout opens (waves never change). A host's assignment carries its
-- wave's soak, so that the check-in that ends a soak is known without
-- reading the rollout's frozen plan (reconciler.Assignment.Soak). Rows
-- written before this migration take it from their frozen plan.
ALTER TABLE rollouts ADD COLUMN wave_soaks TEXT NOT NULL DEFAULT '';
UPDATE rollouts SET wave_soaks = COALESCE((
	SELECT group_concat(json_extract(w.value, '$.soakMinutes'), ',' ORDER BY w.key)
	FROM json_each(rollouts.frozen, '$.waves') AS w), '');
