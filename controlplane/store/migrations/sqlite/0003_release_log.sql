-- 0003_release_log (SQLite): nothing an operator pushed or asked for
-- disappears.

-- channel_refs: every channel ref the source saw, one row per (channel,
-- commit), and what became of it (its fate): pending (verified, no tick
-- has looked at it yet), opened (rollout_id is its rollout), waiting (for
-- the rollout blocked_by), deferred (blocked_by is what holds it: a
-- channel, or "manifest"), superseded (blocked_by is the ref that replaced
-- it before it opened) or refused (code and message say why). ref is the
-- release's meta.ciCommit and rollout_id "<channel>@<ref>", both '' for a
-- release refused before its ref was known. code and message are the
-- reason of the latest change of fate.
CREATE TABLE channel_refs (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	channel     TEXT NOT NULL,
	commit_hash TEXT NOT NULL,
	ref         TEXT NOT NULL,
	rollout_id  TEXT NOT NULL,
	seen_at     INTEGER NOT NULL,
	signed_at   INTEGER NOT NULL,
	fate        TEXT NOT NULL,
	blocked_by  TEXT NOT NULL,
	code        TEXT NOT NULL,
	message     TEXT NOT NULL,
	updated_at  INTEGER NOT NULL,
	CONSTRAINT channel_refs_fate CHECK (fate IN ('pending', 'opened', 'waiting', 'deferred', 'superseded', 'refused'))
) STRICT;
CREATE UNIQUE INDEX channel_refs_commit ON channel_refs (channel, commit_hash) WHERE commit_hash <> '';
CREATE INDEX channel_refs_rollout ON channel_refs (rollout_id);

-- The rollouts opened before this migration, as refs seen.
INSERT INTO channel_refs (channel, commit_hash, ref, rollout_id, seen_at, signed_at, fate, blocked_by, code, message, updated_at)
	SELECT r.channel, '', r.ref, r.id, r.opened_at, 0, 'opened', '', 'ref_moved', 'recorded before the release log existed', r.opened_at
	FROM rollouts r;

-- The channels' current releases that had not opened a rollout yet (a ref
-- waiting for its channel's active rollout, or deferred by a channel
-- edge): pending, so that the tick that decides them records their fate.
INSERT INTO channel_refs (channel, commit_hash, ref, rollout_id, seen_at, signed_at, fate, blocked_by, code, message, updated_at)
	SELECT c.channel, c.source_commit, c.ref, c.channel || '@' || c.ref, c.verified_at, c.signed_at, 'pending', '', 'ref_moved', 'verified before the release log existed', c.verified_at
	FROM channels c
	WHERE NOT EXISTS (SELECT 1 FROM rollouts r WHERE r.id = c.channel || '@' || c.ref);

-- intents.comment: the operator's words with an intent, bounded by the API.
ALTER TABLE intents ADD COLUMN comment TEXT NOT NULL DEFAULT '';
