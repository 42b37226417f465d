-- 0007_analysis: the measurements of canary analyses (rfcs/0003 rule 16),
-- as the control plane took them: one row per (rollout, wave, analysis,
-- seq), written once (a second leader's duplicate is ignored); samples
-- is the JSON of the result's series, error why there is none. They go
-- with their rollout. A rollout's runs live in its frozen JSON.
CREATE TABLE analysis_measurements (
	rollout_id TEXT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
	wave       INTEGER NOT NULL,
	analysis   TEXT NOT NULL,
	seq        INTEGER NOT NULL,
	at         INTEGER NOT NULL,
	query      TEXT NOT NULL,
	samples    TEXT NOT NULL,
	error      TEXT NOT NULL,
	PRIMARY KEY (rollout_id, wave, analysis, seq)
);
