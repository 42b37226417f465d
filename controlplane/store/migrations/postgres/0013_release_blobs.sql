-- 0013_release_blobs: a release's artifacts (fleet.resolved.json and the
-- channel's manifest, tens of megabytes at 100,000 hosts) live in
-- release_blobs, named by the SHA-256 of their bytes ("sha256:<hex>"),
-- and channels name them. The control plane's source writes the bytes
-- while it verifies them (StageReleaseBodies), so that storing the
-- verified release only names them; channels pushed together share one
-- fleet.resolved.json. A blob no channel names is deleted by the next
-- release stored (rfcs/0006 §Channel source). Bodies kept before this
-- migration are named "migrated:<channel>:fleet|manifest".
CREATE TABLE release_blobs (
	id        TEXT PRIMARY KEY,
	body      BYTEA NOT NULL,
	staged_at BIGINT NOT NULL
);
DO $$
BEGIN
	ALTER TABLE release_blobs ALTER COLUMN body SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
	RAISE NOTICE 'this PostgreSQL has no lz4: release blobs stay compressed with pglz';
END
$$;
INSERT INTO release_blobs (id, body, staged_at)
	SELECT 'migrated:' || channel || ':fleet', fleet_body, verified_at FROM channels;
INSERT INTO release_blobs (id, body, staged_at)
	SELECT 'migrated:' || channel || ':manifest', manifest_body, verified_at FROM channels;
ALTER TABLE channels ADD COLUMN fleet_blob TEXT NOT NULL DEFAULT '',
	ADD COLUMN manifest_blob TEXT NOT NULL DEFAULT '';
UPDATE channels SET fleet_blob = 'migrated:' || channel || ':fleet', manifest_blob = 'migrated:' || channel || ':manifest';
ALTER TABLE channels DROP COLUMN fleet_body, DROP COLUMN manifest_body;
