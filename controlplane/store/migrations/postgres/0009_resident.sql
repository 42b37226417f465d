-- 0009_resident: what lets a leading replica keep the reconciler's input
-- between its ticks and read only what changed (rfcs/0006 §Tick loop).
-- host_status.seq is the watermark's changes value of the write that last
-- changed the row, host_seen.seq its seen value; both counters are bumped
-- with the watermark row locked until commit, so their values follow
-- commit order and a reader that saw a value has every row stamped with
-- it or less. watermark.epoch grows with every write outside a tick that
-- a resident input cannot follow (a manifest replaced, rollouts or hosts
-- pruned): the next tick loads everything again.
ALTER TABLE host_status ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX host_status_seq ON host_status (seq);
ALTER TABLE host_seen ADD COLUMN seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX host_seen_seq ON host_seen (seq);
ALTER TABLE watermark ADD COLUMN seen BIGINT NOT NULL DEFAULT 0;
ALTER TABLE watermark ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;
