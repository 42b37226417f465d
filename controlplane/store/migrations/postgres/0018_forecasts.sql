-- 0018_forecasts: the leader's latest forecast of each rollout (rfcs/0014),
-- recorded beside its ticks so that every replica serves it: one row per
-- rollout, replaced by each newer forecast (made_at, the tick's now it
-- started from; end_at when it expects the rollout to end, the zero time
-- when not within the forecast), but first_made_at and first_end_at, the
-- rollout's first forecast's, kept: what was foreseen at its opening. body
-- is the forecast as the API serves it (JSON, at most 8 MiB). A forecast
-- goes with its rollout.
CREATE TABLE forecasts (
	rollout_id    TEXT PRIMARY KEY REFERENCES rollouts (id) ON DELETE CASCADE,
	made_at       BIGINT NOT NULL,
	end_at        BIGINT NOT NULL,
	first_made_at BIGINT NOT NULL,
	first_end_at  BIGINT NOT NULL,
	body          BYTEA NOT NULL
);
DO $$
BEGIN
	ALTER TABLE forecasts ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
	RAISE NOTICE 'this PostgreSQL has no lz4: forecasts stay compressed with pglz';
END
$$;
