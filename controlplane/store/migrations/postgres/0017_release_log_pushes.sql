-- 0017_release_log_pushes: the release log keeps a row per push, not per
-- commit. A channel's ref moved back to a commit it held before (a GitOps
-- rollback, refused as a replay) is a row of its own, and so is every move
-- after it; the channel's latest row with a commit is where the source
-- last saw its ref, so a poll or a restart reading the same ref again adds
-- none (rfcs/0006 §Release log).
DROP INDEX channel_refs_commit;
CREATE INDEX channel_refs_channel ON channel_refs (channel, id);

-- A channel whose rows all predate the log (no commit) gets its current
-- release's row stamped with the channel's commit, so that reading that
-- ref again after this migration is no new push.
UPDATE channel_refs SET commit_hash = (SELECT c.source_commit FROM channels c WHERE c.channel = channel_refs.channel)
	WHERE commit_hash = ''
	AND rollout_id = (SELECT c.channel || '@' || c.ref FROM channels c WHERE c.channel = channel_refs.channel)
	AND NOT EXISTS (SELECT 1 FROM channel_refs o WHERE o.channel = channel_refs.channel AND o.commit_hash <> '');
