package controlplane

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/reconciler"
)

// metrics are the control plane's Prometheus series (rfcs/0006 §Metrics).
type metrics struct {
	reg           *prometheus.Registry
	tickDuration  prometheus.Histogram
	ticks         *prometheus.CounterVec
	actions       *prometheus.CounterVec
	transitions   *prometheus.CounterVec
	gateBlocks    *prometheus.CounterVec
	hostsByState  *prometheus.GaugeVec
	checkin       prometheus.Histogram
	statusBatch   prometheus.Histogram
	verifyFailure *prometheus.CounterVec
	// verifiedAhead counts the releases verified ahead of a promotion
	// (verdicts.go) by outcome; verifying how long a channel's release
	// took to verify, by how.
	verifiedAhead *prometheus.CounterVec
	verifying     *prometheus.HistogramVec
	leader        prometheus.Gauge
	httpRequests  *prometheus.CounterVec
	watching      prometheus.Gauge
	partial       *prometheus.GaugeVec
	silent        *prometheus.GaugeVec
	rollouts      *prometheus.GaugeVec
	rateLimited   *prometheus.CounterVec
	fullLoads     prometheus.Counter
	parked        prometheus.Gauge
	divergences   prometheus.Counter
	memoryTrims   prometheus.Counter
	rechecks      prometheus.Counter
	// handshakes counts the TLS handshakes that reached the server's
	// check of the connection, full ([0]) and resumed ([1]).
	handshakes [2]prometheus.Counter
	notify     *notify.Metrics
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.tickDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "nixfleet_tick_duration_seconds", Help: "Duration of reconcile ticks (load, decide, apply).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	})
	m.ticks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_ticks_total", Help: "Reconcile ticks by result: ok; partial (changed statuses, or host moves past the tick's bound, left for the next tick, which follows at once); quiet (nothing changed, nothing due: not decided); not_leader; error.",
	}, []string{"result"})
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_actions_total", Help: "Host actions decided, by kind (dispatch, rollback).",
	}, []string{"kind"})
	m.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_transitions_total", Help: "State transitions decided, by machine (host, rollout) and new state.",
	}, []string{"machine", "to"})
	m.gateBlocks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_gate_blocks_total", Help: "Hosts newly held by a gate, by gate.",
	}, []string{"gate"})
	m.hostsByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nixfleet_hosts", Help: "Hosts by state in the rollout that drives them.",
	}, []string{"state"})
	m.checkin = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "nixfleet_checkin_duration_seconds", Help: "Time to answer a check-in, long-poll waits excluded.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m.statusBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "nixfleet_status_batch_writes", Help: "Writes a tick must see (changed statuses, hosts back online, confirms, reports) committed together in one transaction.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 10),
	})
	m.verifyFailure = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_verification_failures_total", Help: "Artifacts from git that failed verification, by code.",
	}, []string{"code"})
	m.verifiedAhead = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_releases_verified_ahead_total", Help: "Releases on watched branches verified ahead of their promotion, by outcome: verified, or the code that refused them.",
	}, []string{"outcome"})
	m.verifying = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "nixfleet_release_verification_seconds", Help: "Time to verify the release a channel's ref moved to, by how: full (read from git and verified) or kept (a verdict kept by commit, rechecked).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	}, []string{"how"})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nixfleet_leader", Help: "1 while this replica holds the tick lease.",
	})
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_http_requests_total", Help: "API requests by route and status code.",
	}, []string{"route", "code"})
	m.watching = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nixfleet_watching_since_timestamp_seconds", Help: "Unix time the control plane's current unbroken watch over its hosts began (the leader's last tick).",
	})
	m.partial = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nixfleet_partial_visibility", Help: "1 while a channel is in partial visibility: too many of its hosts late at once to judge any, else 0 (the leader's last tick).",
	}, []string{"channel"})
	m.silent = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nixfleet_partial_visibility_silent_hosts", Help: "Silent hosts of a channel in partial visibility, else 0 (the leader's last tick).",
	}, []string{"channel"})
	m.rollouts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nixfleet_rollouts", Help: "Rollouts the leader drives (every unfinished one, and each channel's latest), by state (the leader's last tick).",
	}, []string{"state"})
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_rate_limited_total", Help: "Requests refused with 429 rate_limited, by the bucket they found empty (host, operator, address).",
	}, []string{"kind"})
	m.fullLoads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nixfleet_tick_full_loads_total", Help: "Ticks that loaded the reconciler's input in full (a new lease, a pruned store, a failed tick) instead of what changed.",
	})
	m.divergences = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nixfleet_tick_divergences_total", Help: "Periodic checks that found the input kept between ticks different from a cold load (the next tick then loaded in full): a bug, logged.",
	})
	m.rechecks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nixfleet_status_rechecks_total", Help: "Check-ins that carried another status than the store held (it lost a write it acknowledged: a crash, a failover, a restore); the host's next check-in compares its status with the store.",
	})
	m.parked = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "nixfleet_long_polls_parked", Help: "Check-in long-polls waiting parked: their connection held without a goroutine or buffers.",
	})
	m.memoryTrims = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "nixfleet_memory_trims_total", Help: "Collections a quiet replica ran to return to the system the memory a burst left (rfcs/0006 §Check-ins at scale 6).",
	})
	handshakes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nixfleet_tls_handshakes_total", Help: "TLS handshakes that reached the server's check of the connection (before the client's signature and Finished are read), by whether the client resumed an earlier session (rfcs/0007 §Authentication 6).",
	}, []string{"resumed"})
	m.handshakes = [2]prometheus.Counter{handshakes.WithLabelValues("false"), handshakes.WithLabelValues("true")}
	m.reg.MustRegister(m.tickDuration, m.statusBatch, m.ticks, m.actions, m.transitions, m.gateBlocks, m.hostsByState,
		m.checkin, m.verifyFailure, m.verifiedAhead, m.verifying, m.leader, m.httpRequests, m.watching, m.partial, m.silent, m.rollouts, m.rateLimited,
		m.fullLoads, m.divergences, m.rechecks, m.parked, m.memoryTrims, handshakes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range reconciler.HostStates {
		m.hostsByState.WithLabelValues(string(s))
	}
	for _, s := range reconciler.RolloutStates {
		m.rollouts.WithLabelValues(string(s))
	}
	for _, g := range []string{codes.ChannelEdge, codes.PartialVisibility, codes.Busy, codes.Quarantined, codes.WaveNotActive,
		codes.HostEdge, codes.Budget, codes.ComplianceEarlierWave, codes.NoPreviousClosure, codes.RollbackOrder,
		codes.RolloutStopped, codes.Unheard, codes.Window, codes.Freeze, codes.Approval} {
		m.gateBlocks.WithLabelValues(g)
	}
	// Every result from the start: an alert on the increase of one sees
	// its first.
	for _, r := range []string{"ok", "partial", "quiet", "not_leader", "error"} {
		m.ticks.WithLabelValues(r)
	}
	m.verifiedAhead.WithLabelValues("verified")
	for _, how := range []string{verifiedFull, verifiedKept} {
		m.verifying.WithLabelValues(how)
	}
	for _, k := range []string{limitHost, limitOperator, limitAddress} {
		m.rateLimited.WithLabelValues(k)
	}
	m.notify = newNotifyMetrics(m.reg)
	return m
}

// observeSight shows what the leader could see at its last tick: its
// watch, and which of the channels is in partial visibility (0 for the
// others; a channel no longer in the fleet has no series).
func (m *metrics) observeSight(watching time.Time, channels []string, vis []reconciler.Visibility) {
	if !watching.IsZero() {
		m.watching.Set(float64(watching.Unix()))
	}
	m.partial.Reset()
	m.silent.Reset()
	for _, c := range channels {
		m.partial.WithLabelValues(c).Set(0)
		m.silent.WithLabelValues(c).Set(0)
	}
	for _, v := range vis {
		if v.Ended.IsZero() {
			m.partial.WithLabelValues(v.Channel).Set(1)
			m.silent.WithLabelValues(v.Channel).Set(float64(v.Silent))
		}
	}
}

// countRollouts counts the rollouts a tick leaves by state: those of its
// input, with the changes of its output.
func countRollouts(in []reconciler.Rollout, changed []reconciler.RolloutUpdate) map[reconciler.RolloutState]int {
	state := make(map[string]reconciler.RolloutState, len(in)+len(changed))
	for i := range in {
		state[in[i].ID] = in[i].State
	}
	for _, u := range changed {
		state[u.Rollout.ID] = u.Rollout.State
	}
	counts := make(map[reconciler.RolloutState]int, len(reconciler.RolloutStates))
	for _, s := range state {
		counts[s]++
	}
	return counts
}

// observeRollouts shows the rollouts the leader's last tick left, by
// state.
func (m *metrics) observeRollouts(counts map[reconciler.RolloutState]int) {
	for _, s := range reconciler.RolloutStates {
		m.rollouts.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
}

// forgetTicks drops the series that show the leader's last tick, when
// this replica stops leading: the new leader's are the ones to read.
func (m *metrics) forgetTicks() {
	m.partial.Reset()
	m.silent.Reset()
	m.rollouts.Reset()
}

// observeTick counts what a tick decided.
func (m *metrics) observeTick(out reconciler.Output) {
	for _, it := range out.Actions {
		m.actions.WithLabelValues(it.Kind).Inc()
	}
	for _, e := range out.Events {
		switch e.Kind {
		case reconciler.EventHostTransition:
			m.transitions.WithLabelValues("host", e.To).Inc()
		case reconciler.EventRolloutTransition, reconciler.EventRolloutOpened:
			m.transitions.WithLabelValues("rollout", e.To).Inc()
		case reconciler.EventHostWaiting:
			m.gateBlocks.WithLabelValues(e.Reason.Gate).Inc()
		}
	}
}
