package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// MaxForecastBody is the largest Forecast.Body PutForecasts stores: 8 MiB.
// A forecast of a 100,000-host rollout that lists every host is of that
// order; the caller decides what goes in, and cuts it to fit.
const MaxForecastBody = 8 << 20

// Forecast is the leader's latest forecast of one rollout (rfcs/0014).
type Forecast struct {
	RolloutID string
	// MadeAt is the time the forecast started from (a tick's now); End
	// when it expects the rollout to end (zero: not within the forecast).
	MadeAt time.Time
	End    time.Time
	// FirstMadeAt and FirstEnd are the rollout's first forecast's, kept
	// when later ones replace it: what was foreseen at its opening.
	FirstMadeAt time.Time
	FirstEnd    time.Time
	// Body is the forecast as the API serves it (JSON), opaque here; at
	// most MaxForecastBody bytes.
	Body []byte
}

// PutForecasts records the latest forecast of each rollout given, in one
// write transaction that takes no tick lock: it is no change a tick must
// see, and it runs beside ticks. It holds the rollouts' rows FOR KEY SHARE
// (in id order), which a tick's updates of them do not wait for, so that
// a Prune deleting one waits for it, or goes first and the forecast is
// skipped. A forecast replaces the stored one unless its MadeAt is before
// it, and keeps its first (FirstMadeAt and FirstEnd; a rollout's first put
// sets them from MadeAt and End). A forecast of a rollout the store does
// not have is skipped. A Body over MaxForecastBody returns ErrTooLarge,
// and an empty RolloutID an error: then nothing is written.
func (s *db) PutForecasts(ctx context.Context, fs []Forecast) error {
	if len(fs) == 0 {
		return nil
	}
	for _, f := range fs {
		if f.RolloutID == "" {
			return errors.New("store: put forecasts: a forecast without a rollout id")
		}
		if len(f.Body) > MaxForecastBody {
			return fmt.Errorf("%w: forecast of %s: %d bytes, at most %d", ErrTooLarge, f.RolloutID, len(f.Body), MaxForecastBody)
		}
	}
	ids := make([]string, 0, len(fs))
	for _, f := range fs {
		ids = append(ids, f.RolloutID)
	}
	err := s.write(ctx, func(tx *txn) error {
		have := map[string]bool{}
		err := inChunks(ids, idChunk, func(chunk []string) error {
			return eachRow(ctx, tx, func(rs row) error {
				id, err := scanString(rs)
				have[id] = err == nil
				return err
			}, "SELECT id FROM rollouts WHERE id IN ("+placeholders(len(chunk))+") ORDER BY id FOR KEY SHARE", anys(chunk)...)
		})
		if err != nil {
			return err
		}
		for _, f := range fs {
			if !have[f.RolloutID] {
				continue
			}
			made, end := micros(f.MadeAt), micros(f.End)
			_, err := tx.exec(ctx, `INSERT INTO forecasts (rollout_id, made_at, end_at, first_made_at, first_end_at, body)
				VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (rollout_id) DO UPDATE SET made_at = excluded.made_at, end_at = excluded.end_at, body = excluded.body
				WHERE forecasts.made_at <= excluded.made_at`,
				f.RolloutID, made, end, made, end, bytesOrEmpty(f.Body))
			if err != nil {
				return fmt.Errorf("forecast of %s: %w", f.RolloutID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: put forecasts: %w", err)
	}
	return nil
}

// Forecast returns a rollout's latest forecast (ErrNotFound when none).
func (s *db) Forecast(ctx context.Context, rolloutID string) (Forecast, error) {
	f := Forecast{RolloutID: rolloutID}
	var made, end, firstMade, firstEnd int64
	err := s.read(ctx, func(tx *txn) error {
		return tx.queryRow(ctx, "SELECT made_at, end_at, first_made_at, first_end_at, body FROM forecasts WHERE rollout_id = ?", rolloutID).
			Scan(&made, &end, &firstMade, &firstEnd, &f.Body)
	})
	if errors.Is(err, errNoRows) {
		return Forecast{}, fmt.Errorf("%w: forecast of %q", ErrNotFound, rolloutID)
	}
	if err != nil {
		return Forecast{}, fmt.Errorf("store: forecast of %s: %w", rolloutID, err)
	}
	f.MadeAt, f.End, f.FirstMadeAt, f.FirstEnd = fromMicros(made), fromMicros(end), fromMicros(firstMade), fromMicros(firstEnd)
	return f, nil
}

// ActivationTime is what the leader measured of one host's activations
// (rfcs/0014): the time from its dispatch to its confirm, smoothed over
// its activations: the forecasts' model of the host.
type ActivationTime struct {
	Host string
	// Typical is the smoothed time; Samples how many activations it has
	// seen; MeasuredAt the time of the latest.
	Typical    time.Duration
	Samples    int
	MeasuredAt time.Time
}

// PutActivationTimes records each host's activation time given, replacing
// the one stored, in one write transaction that takes no tick lock: it is
// no change a tick must see, and it runs beside ticks. A host given twice
// keeps the last. Typical is stored in whole milliseconds (rounded down),
// MeasuredAt in microseconds. An empty Host, a negative Typical, or
// Samples below 1 (or over the schema's 32-bit column) returns an error:
// then nothing is written. Rows go in hostname order, in multi-row
// statements (insertRows), so that writers that overlap lock them in one
// order.
func (s *db) PutActivationTimes(ctx context.Context, ts []ActivationTime) error {
	if len(ts) == 0 {
		return nil
	}
	last := make(map[string]ActivationTime, len(ts))
	for _, a := range ts {
		switch {
		case a.Host == "":
			return errors.New("store: put activation times: an activation time without a host")
		case a.Typical < 0:
			return fmt.Errorf("store: put activation times: %s: negative typical time %s", a.Host, a.Typical)
		case a.Samples < 1 || a.Samples > math.MaxInt32:
			return fmt.Errorf("store: put activation times: %s: %d samples, want 1 to %d", a.Host, a.Samples, math.MaxInt32)
		}
		last[a.Host] = a
	}
	hosts := make([]string, 0, len(last))
	for h := range last {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	args := make([]any, 0, 4*len(hosts))
	for _, h := range hosts {
		a := last[h]
		args = append(args, h, a.Typical.Milliseconds(), a.Samples, micros(a.MeasuredAt))
	}
	err := s.write(ctx, func(tx *txn) error {
		return tx.insertRows(ctx, "INSERT INTO activation_times (hostname, typical_ms, samples, measured_at)",
			` ON CONFLICT (hostname) DO UPDATE SET typical_ms = excluded.typical_ms, samples = excluded.samples, measured_at = excluded.measured_at`,
			4, args)
	})
	if err != nil {
		return fmt.Errorf("store: put activation times: %w", err)
	}
	return nil
}

// ActivationTimes returns every host's activation time, by host.
func (s *db) ActivationTimes(ctx context.Context) (map[string]ActivationTime, error) {
	out := map[string]ActivationTime{}
	err := s.read(ctx, func(tx *txn) error {
		clear(out)
		return eachRow(ctx, tx, func(rs row) error {
			var a ActivationTime
			var ms, at int64
			if err := rs.Scan(&a.Host, &ms, &a.Samples, &at); err != nil {
				return err
			}
			a.Typical, a.MeasuredAt = time.Duration(ms)*time.Millisecond, fromMicros(at)
			out[a.Host] = a
			return nil
		}, "SELECT hostname, typical_ms, samples, measured_at FROM activation_times")
	})
	if err != nil {
		return nil, fmt.Errorf("store: activation times: %w", err)
	}
	return out, nil
}
