package agent

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/proto"
)

// Metrics are the agent's Prometheus series (rfcs/0008 §Metrics), kept in
// a registry of their own and written as a node-exporter textfile: the
// agent listens on no port. The methods of a nil *Metrics do nothing.
type Metrics struct {
	path            string
	reg             *prometheus.Registry
	info            *prometheus.GaugeVec
	lastCheckin     prometheus.Gauge
	checkinFailures prometheus.Counter
	activations     *prometheus.CounterVec
	rollbacks       prometheus.Counter
	prefetches      *prometheus.CounterVec

	mu    sync.Mutex
	shown [3]string // the labels of info: current, booted, target
}

// outcomes label nixfleet_agent_activations_total: what the control plane
// records of an activation, from the agent's reports and its confirm.
var outcomes = []string{proto.OutcomeStarted, proto.OutcomeConfirmed, proto.OutcomeFailed,
	proto.OutcomeDeferred, proto.OutcomeRolledBack, proto.OutcomeManifestRejected, proto.OutcomeBootFailed}

// The result label of nixfleet_agent_prefetches_total.
const (
	prefetchFetched   = "fetched"
	prefetchFailed    = "failed"
	prefetchCancelled = "cancelled"
)

var prefetchResults = []string{prefetchFetched, prefetchFailed, prefetchCancelled}

// NewMetrics returns the agent's metrics, written to path by Write. Every
// series exists from the start, the counters at 0.
func NewMetrics(path string) *Metrics {
	m := &Metrics{path: path, reg: prometheus.NewRegistry()}
	m.info = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nixfleet_agent_info", Help: "1, labelled with the closures (store path basenames, \"\" when none) the host runs, booted, and was last told to run.",
	}, []string{"current", "booted", "target"})
	m.lastCheckin = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nixfleet_agent_last_checkin_timestamp_seconds", Help: "When the control plane last answered a check-in (0: not since the agent started).",
	})
	m.checkinFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nixfleet_agent_checkin_failures_total", Help: "Check-ins that failed: no answer, or an error (a 429 included).",
	})
	m.activations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_agent_activations_total", Help: "Activation outcomes, as the control plane records them: started, confirmed, failed, deferred, rolled_back, manifest_rejected, boot_failed.",
	}, []string{"outcome"})
	m.rollbacks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nixfleet_agent_rollbacks_total", Help: "Rollbacks the agent began: a failed or unconfirmed switch, or one the control plane asked for.",
	})
	m.prefetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_agent_prefetches_total", Help: "Ended prefetches of a coming closure, by result: fetched, failed, cancelled.",
	}, []string{"result"})
	m.reg.MustRegister(m.info, m.lastCheckin, m.checkinFailures, m.activations, m.rollbacks, m.prefetches)
	for _, o := range outcomes {
		m.activations.WithLabelValues(o)
	}
	for _, r := range prefetchResults {
		m.prefetches.WithLabelValues(r)
	}
	m.info.WithLabelValues("", "", "").Set(1)
	return m
}

// CheckedIn notes a check-in the control plane answered at at.
func (m *Metrics) CheckedIn(at time.Time) {
	if m != nil {
		m.lastCheckin.Set(float64(at.UnixNano()) / 1e9)
	}
}

// CheckinFailed counts a check-in that failed.
func (m *Metrics) CheckinFailed() {
	if m != nil {
		m.checkinFailures.Inc()
	}
}

// Activation counts an activation outcome (one of outcomes).
func (m *Metrics) Activation(outcome string) {
	if m != nil {
		m.activations.WithLabelValues(outcome).Inc()
	}
}

// RollbackBegun counts a rollback the agent began.
func (m *Metrics) RollbackBegun() {
	if m != nil {
		m.rollbacks.Inc()
	}
}

// Prefetch counts an ended prefetch (one of prefetchResults).
func (m *Metrics) Prefetch(result string) {
	if m != nil {
		m.prefetches.WithLabelValues(result).Inc()
	}
}

// SetInfo sets the closures of nixfleet_agent_info.
func (m *Metrics) SetInfo(current, booted, target string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if labels := [3]string{current, booted, target}; labels != m.shown {
		m.info.Reset()
		m.info.WithLabelValues(current, booted, target).Set(1)
		m.shown = labels
	}
}

// Write replaces the file atomically: a temporary file in its directory,
// renamed over it (prometheus.WriteToTextfile), so that node-exporter
// never reads half of one.
func (m *Metrics) Write() error {
	if m == nil {
		return nil
	}
	return prometheus.WriteToTextfile(m.path, m.reg)
}

// countStep counts what a step the loop folded in (st to next) ended in:
// the outcomes its reports and an accepted confirm record, and a rollback
// begun. It reports whether it counted anything.
func (a *Agent) countStep(st, next State, step Step, res Result, rep *proto.ReportRequest) bool {
	if a.metrics == nil {
		return false
	}
	counted := false
	if step.Kind == StepConfirm && res.Err == nil {
		a.metrics.Activation(proto.OutcomeConfirmed)
		counted = true
	}
	for _, r := range []*proto.ReportRequest{step.Report, rep} {
		if r == nil {
			continue
		}
		if o := proto.ReportOutcome(r.Kind); o != "" {
			a.metrics.Activation(o)
			counted = true
		}
	}
	if next.Phase == PhaseRollingBack && st.Phase != PhaseRollingBack {
		a.metrics.RollbackBegun()
		counted = true
	}
	return counted
}

// writeMetrics writes the metrics file, if any, with the closures the
// host runs and was told to run now. A failure is logged, never more.
func (a *Agent) writeMetrics() {
	if a.metrics == nil {
		return
	}
	a.mu.Lock()
	target := ""
	if a.known != nil {
		target = a.known.Closure
	}
	a.mu.Unlock()
	a.metrics.SetInfo(closureName(a.c.Exec.Current()), closureName(a.c.Exec.Booted()), target)
	if err := a.metrics.Write(); err != nil {
		a.c.Log.Warn("writing the metrics file", "file", a.metrics.path, "err", err)
	}
}

// closureName is a store path's basename ("" for none).
func closureName(path string) string {
	if path == "" {
		return ""
	}
	return filepath.Base(path)
}
