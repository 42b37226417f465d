-- 0010_lz4: the columns that hold a whole fleet (a release's artifacts,
-- a rollout's manifest and frozen plan: tens of megabytes at 100,000
-- hosts) are compressed with lz4 instead of pglz, which took most of the
-- half second a release of that size spent being stored (BENCHMARKS.md,
-- store tick open). Only values written from now on are; a server built
-- without lz4 keeps pglz.
DO $$
BEGIN
	ALTER TABLE channels ALTER COLUMN fleet_body SET COMPRESSION lz4,
		ALTER COLUMN manifest_body SET COMPRESSION lz4;
	ALTER TABLE rollout_manifests ALTER COLUMN body SET COMPRESSION lz4;
	ALTER TABLE rollouts ALTER COLUMN frozen SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
	RAISE NOTICE 'this PostgreSQL has no lz4: large values stay compressed with pglz';
END
$$;
