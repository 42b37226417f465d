-- 0016_wave_soaks: each wave's soak in minutes, in wave order, comma
-- separated ("10,10,0"; '' for a rollout without waves), written when the
-- rollout opens (waves never change). A host's assignment carries its
-- wave's soak, so that the check-in that ends a soak is known without
-- reading the rollout's frozen plan (reconciler.Assignment.Soak). Rows
-- written before this migration take it from their frozen plan.
ALTER TABLE rollouts ADD COLUMN wave_soaks TEXT NOT NULL DEFAULT '';
UPDATE rollouts SET wave_soaks = COALESCE((
	SELECT string_agg(w.value->>'soakMinutes', ',' ORDER BY w.n)
	FROM jsonb_array_elements(CASE WHEN jsonb_typeof(frozen::jsonb->'waves') = 'array' THEN frozen::jsonb->'waves' ELSE '[]'::jsonb END)
		WITH ORDINALITY AS w(value, n)), '');
