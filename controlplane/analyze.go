package controlplane

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/prom"
	"github.com/nixfleet/nixfleet/controlplane/store"
	"github.com/nixfleet/nixfleet/internal/clock"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// analyzer takes the canary analysis measurements the leader's ticks ask
// for (rfcs/0006 §Canary analysis, rfcs/0003 rule 16):
//
//  1. after each committed tick the ticker hands it the tick's complete
//     list of measurements due (Output.Measure); a replica that stops
//     leading hands it nothing, and it forgets the list;
//  2. when a measurement is due it reads the rollout, fills in the
//     analysis's query for the wave's hosts, asks the Prometheus source
//     the analysis names (its default one when it names none) for it at
//     that moment, and records what came back — the series, or the error
//     that left none — as one measurement, then asks for a tick; an
//     analysis naming a source this replica does not have is recorded
//     without a query, as a reconciler.SourceUnknownError saying how to
//     configure it, which the tick judges inconclusive;
//  3. measurements run concurrently, each at most once at a time, and
//     never block a tick or a check-in; a query that hangs ends with its
//     timeout, as an inconclusive measurement.
//
// The reconciler judges the results: the analyzer only reports them.
type analyzer struct {
	st    store.Store
	prom  *prom.Sources
	clock clock.Clock
	board *board
	log   *slog.Logger

	queries  *prometheus.CounterVec
	duration prometheus.Histogram

	mu       sync.Mutex
	due      []reconciler.MeasureRequest
	inFlight map[reconciler.MeasureKey]bool
	// recorded are the measurements of due recorded since the tick that
	// asked for them: not taken again while a tick that has not read them
	// yet still asks.
	recorded map[reconciler.MeasureKey]bool
	changed  chan struct{}
	wg       sync.WaitGroup
}

func newAnalyzer(st store.Store, p *prom.Sources, clk clock.Clock, b *board, log *slog.Logger,
	reg *prometheus.Registry) *analyzer {
	a := &analyzer{st: st, prom: p, clock: clk, board: b, log: log,
		inFlight: map[reconciler.MeasureKey]bool{}, recorded: map[reconciler.MeasureKey]bool{}, changed: make(chan struct{}, 1)}
	a.queries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_analysis_queries_total",
		Help: "Canary analysis queries sent to Prometheus, by source (default, or a [[prometheus.source]]'s name) and result (ok: a result came back; error: none did).",
	}, []string{"source", "result"})
	a.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "nixfleet_analysis_query_duration_seconds", Help: "Time Prometheus took to answer a canary analysis query.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	reg.MustRegister(a.queries, a.duration)
	return a
}

// schedule replaces the measurements due with a tick's list (nil: none,
// this replica does not lead).
func (a *analyzer) schedule(due []reconciler.MeasureRequest) {
	a.mu.Lock()
	a.due = due
	for k := range a.recorded {
		if !slices.ContainsFunc(due, func(r reconciler.MeasureRequest) bool { return r.Key() == k }) {
			delete(a.recorded, k)
		}
	}
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// run takes measurements as they fall due until ctx ends, then waits for
// those under way.
func (a *analyzer) run(ctx context.Context) {
	defer a.wg.Wait()
	for {
		next, ready := a.ready()
		for _, r := range ready {
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				a.measure(ctx, r)
			}()
		}
		var wake <-chan time.Time
		var timer clock.Timer
		if !next.IsZero() {
			timer = a.clock.NewTimer(max(next.Sub(a.clock.Now()), 0))
			wake = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-a.changed:
		case <-wake:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// ready marks the measurements due now as under way and returns them,
// with the time the next one falls due (zero when none waits).
func (a *analyzer) ready() (next time.Time, ready []reconciler.MeasureRequest) {
	now := a.clock.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.due {
		if a.inFlight[r.Key()] || a.recorded[r.Key()] {
			continue
		}
		if r.At.After(now) {
			if next.IsZero() || r.At.Before(next) {
				next = r.At
			}
			continue
		}
		a.inFlight[r.Key()] = true
		ready = append(ready, r)
	}
	return next, ready
}

// measure takes one measurement and records it. A measurement that could
// not be recorded (the store failed) stays due: the next tick asks for it
// again.
func (a *analyzer) measure(ctx context.Context, r reconciler.MeasureRequest) {
	defer func() {
		a.mu.Lock()
		delete(a.inFlight, r.Key())
		a.mu.Unlock()
		select {
		case a.changed <- struct{}{}:
		default:
		}
	}()
	m := reconciler.Measurement{RolloutID: r.RolloutID, Wave: r.Wave, Analysis: r.Analysis, Seq: r.Seq}
	ro, err := a.st.Rollout(ctx, r.RolloutID)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Error("reading a rollout for its analysis", "rollout", r.RolloutID, "err", err)
		}
		return
	}
	spec, ok := specOf(ro, r.Analysis)
	if !ok {
		a.log.Error("a measurement of an analysis the rollout does not have", "rollout", r.RolloutID, "analysis", r.Analysis)
		return
	}
	m.At = a.clock.Now().UTC()
	var started time.Time
	for _, run := range ro.Analyses {
		if run.Wave == r.Wave && run.Name == r.Analysis {
			started = run.StartedAt
		}
	}
	if client, ok := a.prom.Client(spec.Source); !ok {
		m.Query = reconciler.AnalysisQuery(&ro, r.Wave, spec)
		m.Error = reconciler.SourceUnknownError(unknownSource(spec, a.prom.Names()))
		a.log.Warn("analysis names an unknown Prometheus source", "rollout", r.RolloutID, "wave", r.Wave, "analysis", r.Analysis,
			"seq", r.Seq, "source", spec.Source, "code", codes.AnalysisSourceUnknown)
	} else {
		source := cmp.Or(spec.Source, proto.DefaultSource)
		start := time.Now()
		taken := takeMeasurement(ctx, client, &ro, r, spec, m.At, started)
		if ctx.Err() != nil {
			return // shutting down: not a verdict on the wave
		}
		m.Query, m.Samples, m.Compared, m.Error = taken.Query, taken.Samples, taken.Compared, taken.Error
		a.duration.Observe(time.Since(start).Seconds())
		if m.Error != "" {
			a.queries.WithLabelValues(source, "error").Inc()
			a.log.Warn("analysis query failed", "rollout", r.RolloutID, "wave", r.Wave, "analysis", r.Analysis, "seq", r.Seq, "source", source, "err", m.Error)
		} else {
			a.queries.WithLabelValues(source, "ok").Inc()
		}
	}
	if _, err := a.st.RecordMeasurement(ctx, m); err != nil {
		if ctx.Err() == nil {
			a.log.Error("recording a measurement", "rollout", r.RolloutID, "analysis", r.Analysis, "err", err)
		}
		return
	}
	a.mu.Lock()
	a.recorded[r.Key()] = true
	a.mu.Unlock()
	a.board.post(wakeTick)
}

// takeMeasurement takes one measurement of an analysis for a wave at at,
// on client: the query and its series, or for a comparison whose request
// names a baseline the values of both groups over its window, which
// reaches back no further than started (the run's start; zero: no
// bound), because the canary's values before it ran the release are not
// the release's; or the error that left none.
func takeMeasurement(ctx context.Context, client *prom.Client, ro *reconciler.Rollout, r reconciler.MeasureRequest,
	spec proto.Analysis, at, started time.Time) reconciler.Measurement {
	m := reconciler.Measurement{RolloutID: ro.ID, Wave: r.Wave, Analysis: spec.Name, Seq: r.Seq, At: at}
	if spec.Compare == nil || len(r.Baseline) == 0 {
		m.Query = reconciler.AnalysisQuery(ro, r.Wave, spec)
		samples, err := client.Query(ctx, m.Query, at)
		if err != nil {
			m.Error = err.Error()
		}
		m.Samples = samples
		return m
	}
	m.Query = reconciler.GroupQuery(ro, r.Wave, spec, r.Canary)
	window, werr := analysis.ParseInterval(spec.Compare.Window)
	step, serr := analysis.ParseInterval(spec.Compare.Step)
	if err := cmp.Or(werr, serr); err != nil {
		m.Error = "compare: " + err.Error() // validation refuses it
		return m
	}
	from := at.Add(-window)
	if started.After(from) {
		from = started
	}
	var out reconciler.Compared
	for _, g := range []struct {
		name  string
		hosts []string
		into  *[]float64
	}{{"canary", r.Canary, &out.Canary}, {"baseline", r.Baseline, &out.Baseline}} {
		vs, err := client.Values(ctx, reconciler.GroupQuery(ro, r.Wave, spec, g.hosts), from, at, step)
		if err != nil {
			m.Error = fmt.Sprintf("the %s's values: %s", g.name, err)
			return m
		}
		*g.into = thin(vs, proto.MaxComparisonSamples)
	}
	m.Compared = &out
	return m
}

// thin keeps at most n of vs, evenly spread.
func thin(vs []float64, n int) []float64 {
	if len(vs) <= n {
		return vs
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = vs[i*len(vs)/n]
	}
	return out
}

// unknownSource says that an analysis names a Prometheus source the
// control plane does not have (known: its named sources), and how to
// configure it.
func unknownSource(a proto.Analysis, known []string) string {
	have := "none besides its default"
	if len(known) > 0 {
		have = strings.Join(known, ", ")
	}
	return fmt.Sprintf("analysis %s names Prometheus source %q, which this control plane does not have (its sources: %s): "+
		"add a [[prometheus.source]] table with name = %q to the --config file of every replica and restart them, "+
		"then resume the rollout; or take source out of the analysis to use the default Prometheus", a.Name, a.Source, have, a.Source)
}

// unknownSources returns the Prometheus sources that the analyses of a
// channel's rollout policy name and sources lacks, in the policy's order.
func unknownSources(f *proto.FleetResolved, channel string, sources *prom.Sources) []string {
	var out []string
	for _, a := range f.RolloutPolicies[f.Channels[channel].RolloutPolicy].HealthGate.Analysis {
		if _, ok := sources.Client(a.Source); !ok && !slices.Contains(out, a.Source) {
			out = append(out, a.Source)
		}
	}
	return out
}

// specOf finds a rollout's analysis by name.
func specOf(r reconciler.Rollout, name string) (a proto.Analysis, ok bool) {
	for _, s := range r.HealthGate.Analysis {
		if s.Name == name {
			return s, true
		}
	}
	return a, false
}
