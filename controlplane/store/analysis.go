package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// RecordMeasurement stores an analysis measurement the tick asked for
// (rfcs/0003 rule 16) and reports whether it was new: a measurement of
// the same run and seq stored before (another leader's) is kept, and this
// one is dropped. A new one counts as a change a tick must see. The query
// is kept cut at reconciler.MaxMeasuredQuery bytes.
func (s *db) RecordMeasurement(ctx context.Context, m reconciler.Measurement) (bool, error) {
	if m.RolloutID == "" || m.Analysis == "" || m.Seq < 1 || m.Wave < 0 {
		return false, fmt.Errorf("store: record measurement: incomplete: %+v", m)
	}
	samples := "[]"
	if len(m.Samples) > 0 {
		var err error
		if samples, err = marshal(m.Samples); err != nil {
			return false, err
		}
	}
	var compared *string
	if m.Compared != nil {
		c, err := marshal(m.Compared)
		if err != nil {
			return false, err
		}
		compared = &c
	}
	query := m.Query
	if len(query) > reconciler.MaxMeasuredQuery {
		query = query[:reconciler.MaxMeasuredQuery]
	}
	var n int64
	err := s.write(ctx, func(tx *txn) error {
		var err error
		n, err = tx.exec(ctx, `INSERT INTO analysis_measurements (rollout_id, wave, analysis, seq, at, query, samples, error, compared)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (rollout_id, wave, analysis, seq) DO NOTHING`,
			m.RolloutID, m.Wave, m.Analysis, m.Seq, micros(m.At), query, samples, m.Error, compared)
		if err != nil || n == 0 {
			return err
		}
		return tx.bumpChanges(ctx)
	})
	if err != nil {
		return false, fmt.Errorf("store: record measurement %s wave %d %s #%d: %w", m.RolloutID, m.Wave, m.Analysis, m.Seq, err)
	}
	return n > 0, nil
}

// Measurements returns the measurements of a rollout's wave, by analysis
// and seq.
func (s *db) Measurements(ctx context.Context, rolloutID string, wave int) ([]reconciler.Measurement, error) {
	var out []reconciler.Measurement
	err := s.read(ctx, func(tx *txn) error {
		var err error
		out, err = loadMeasurements(ctx, tx, map[string]int{rolloutID: wave})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: measurements of %s: %w", rolloutID, err)
	}
	return out, nil
}

// loadMeasurements reads the measurements of the given waves (rollout id
// -> wave), sorted by rollout, analysis and seq.
func loadMeasurements(ctx context.Context, c conn, waves map[string]int) ([]reconciler.Measurement, error) {
	ids := make([]string, 0, len(waves))
	for id := range waves {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := []reconciler.Measurement{}
	err := inChunks(ids, idChunk, func(chunk []string) error {
		return eachRow(ctx, c, func(rs row) error {
			var m reconciler.Measurement
			var at int64
			var samples string
			var compared *string
			if err := rs.Scan(&m.RolloutID, &m.Wave, &m.Analysis, &m.Seq, &at, &m.Query, &samples, &m.Error, &compared); err != nil {
				return err
			}
			if compared != nil {
				m.Compared = &reconciler.Compared{}
				if err := unmarshal(*compared, m.Compared); err != nil {
					return err
				}
			}
			if m.Wave != waves[m.RolloutID] {
				return nil
			}
			m.At = fromMicros(at)
			if samples != "[]" {
				var ss []proto.MetricSample
				if err := unmarshal(samples, &ss); err != nil {
					return err
				}
				m.Samples = ss
			}
			out = append(out, m)
			return nil
		}, "SELECT rollout_id, wave, analysis, seq, at, query, samples, error, compared FROM analysis_measurements WHERE rollout_id IN ("+
			placeholders(len(chunk))+") ORDER BY rollout_id, analysis, seq", anys(chunk)...)
	})
	if err != nil {
		return nil, fmt.Errorf("load measurements: %w", err)
	}
	return out, nil
}

// loadMeasured reads the measurements of the rollouts' measured waves.
func loadMeasured(ctx context.Context, tx *txn, rs []reconciler.Rollout) ([]reconciler.Measurement, error) {
	waves := measuredWaves(rs)
	if len(waves) == 0 {
		return nil, nil
	}
	ms, err := loadMeasurements(ctx, tx, waves)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return ms, nil
}

// measuredWaves are the waves whose measurements a tick loads: the
// current wave of every loaded rollout that is Active or Halted (a resume
// in the tick may count what was measured meanwhile) and has analyses.
func measuredWaves(rs []reconciler.Rollout) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		if len(r.HealthGate.Analysis) > 0 && (r.State == reconciler.RolloutActive || r.State == reconciler.RolloutHalted) {
			out[r.ID] = r.Wave
		}
	}
	return out
}
