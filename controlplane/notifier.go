package controlplane

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/controlplane/notify"
)

// Notifications (rfcs/0006 §Notifications): the leader sends the journal
// to the configured webhook sinks (package notify). The replica wires
// the notifier to its parts:
//
//   - it sends while this replica holds the tick lease, unexpired by its
//     clock (sending);
//   - it wakes when the hub sees the journal grow (followSignal);
//   - a leader shutting down gives its lease up only after the notifier
//     stopped: a POST in flight is finished and its cursor written, so
//     the next leader does not send it again (ticker.beforeRelease);
//   - the hourly prune forgets the cursors of sinks no longer configured
//     (pruneNotificationCursors).

// forgetCursorsAfter is how long the cursor of a sink the leader does
// not have stays: replicas being reconfigured one by one keep their
// sinks' places meanwhile, and a sink removed and added back within it
// loses nothing.
const forgetCursorsAfter = time.Hour

func (s *Server) newNotifier() error {
	version := s.cfg.Version
	if version == "" {
		version = "dev"
	}
	n, err := notify.New(notify.Options{Sinks: s.cfg.Notifications, Store: s.st, Leader: s.sending,
		Signal: s.hub.followSignal, Clock: s.cfg.Clock, Log: s.log, Metrics: s.m.notify,
		UserAgent: "nixfleet-cp/" + version})
	if err != nil {
		return err
	}
	s.notifier = n
	s.ticker.beforeRelease = func() { <-n.Done() }
	for _, sink := range s.cfg.Notifications {
		if len(sink.Secret) == 0 && (sink.Format == "" || sink.Format == notify.FormatJSON) {
			s.log.Warn("a notification sink has no secret: its receiver cannot tell our POSTs from anyone's", "sink", sink.Name)
		}
	}
	return nil
}

// sending reports whether this replica sends notifications — it holds
// the tick lease, and the lease has not expired by its clock — and the
// lease's epoch.
func (s *Server) sending() (int64, bool) {
	l, ok := s.ticker.isLeader()
	if !ok || !s.cfg.Clock.Now().Before(l.Expires) {
		return 0, false
	}
	return l.Epoch, true
}

// pruneNotificationCursors deletes the cursors of the sinks this replica
// does not have that did not move for forgetCursorsAfter.
func (s *Server) pruneNotificationCursors(ctx context.Context) {
	keep := make([]string, len(s.cfg.Notifications))
	for i, sink := range s.cfg.Notifications {
		keep[i] = sink.Name
	}
	n, err := s.st.DeleteNotificationCursors(ctx, keep, s.cfg.Clock.Now().Add(-forgetCursorsAfter))
	switch {
	case err != nil:
		s.log.Error("pruning notification cursors", "err", err)
	case n > 0:
		s.log.Info("forgot the notification cursors of sinks no longer configured", "cursors", n)
	}
}

// newNotifyMetrics registers the notifier's series (rfcs/0006 §Metrics).
func newNotifyMetrics(reg *prometheus.Registry) *notify.Metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"sink"})
		reg.MustRegister(c)
		return c
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"sink"})
		reg.MustRegister(g)
		return g
	}
	return &notify.Metrics{
		Sent:     counter("nixfleet_notifications_sent_total", "Journal events delivered to a notification sink (a 2xx answer)."),
		Failures: counter("nixfleet_notification_failures_total", "Failed POSTs to a notification sink (each attempt)."),
		Pruned: counter("nixfleet_notification_pruned_events_total",
			"Journal event ids retention deleted before a notification sink was sent or passed them (an upper bound of the events it missed)."),
		Cursor: gauge("nixfleet_notification_cursor", "The last journal event id a notification sink was sent or passed (on the replica that sends)."),
		Backlog: gauge("nixfleet_notification_backlog_events",
			"Journal events after a notification sink's cursor: the newest event id minus the cursor, events its filter passes included (on the replica that sends)."),
		LastSuccess: gauge("nixfleet_notification_last_success_timestamp_seconds", "Unix time of the last delivery to a notification sink."),
	}
}
