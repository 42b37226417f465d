package controlplane

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/controlplane/store"
	rc "github.com/nixfleet/nixfleet/reconciler"
)

// TestForecasterMeasures: the forecaster measures a host's activation from
// the tick that dispatches it to the one that sees its confirm, and only
// those: a host dispatched before it watched, one that failed, and one
// whose rollout left while another replica led are not measured. A
// host's time is the mean of its latest and the one before; the times
// reach the store, and hosts not measured take the median.
func TestForecasterMeasures(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "cp.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := newForecaster(st, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), rc.Model{Activation: 7 * time.Minute}, &kept.Keeper{})
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	host := func(name string, s rc.HostState, at time.Time) rc.RolloutHost {
		return rc.RolloutHost{Hostname: name, State: s, Since: at}
	}
	tick := func(at time.Time, live []string, out rc.Output) {
		in := rc.Input{Now: at}
		for _, id := range live {
			in.Rollouts = append(in.Rollouts, rc.Rollout{ID: id})
		}
		f.decided(in, out)
		f.mu.Lock()
		samples := f.samples
		f.samples = nil
		f.mu.Unlock()
		f.learn(ctx, samples)
	}
	// r1 opens: a and b dispatched at once, c already Activating when this
	// replica began (never seen dispatched).
	tick(t0, nil, rc.Output{Rollouts: []rc.RolloutUpdate{{New: true, Rollout: rc.Rollout{ID: "r1", Hosts: []rc.RolloutHost{
		host("a", rc.HostActivating, t0), host("b", rc.HostActivating, t0)}}}}})
	t1 := t0.Add(2 * time.Minute)
	tick(t1, []string{"r1"}, rc.Output{Hosts: []rc.HostUpdate{
		{RolloutID: "r1", From: rc.HostActivating, Host: host("a", rc.HostSoaking, t1)},
		{RolloutID: "r1", From: rc.HostActivating, Host: host("b", rc.HostFailed, t1)},
		{RolloutID: "r1", From: rc.HostActivating, Host: host("c", rc.HostSoaking, t1)},
		{RolloutID: "r1", From: rc.HostPending, Host: host("d", rc.HostActivating, t1)},
	}})
	// d's rollout leaves while another replica leads: forgotten.
	t2 := t1.Add(time.Hour)
	tick(t2, []string{"r2"}, rc.Output{Rollouts: []rc.RolloutUpdate{{New: true, Rollout: rc.Rollout{ID: "r2", Hosts: []rc.RolloutHost{
		host("a", rc.HostActivating, t2)}}}}})
	if _, ok := f.dispatched[[2]string{"r1", "d"}]; ok {
		t.Error("a host of a rollout no longer live is still waited for")
	}
	t3 := t2.Add(4 * time.Minute)
	tick(t3, []string{"r2"}, rc.Output{Hosts: []rc.HostUpdate{{RolloutID: "r2", From: rc.HostActivating, Host: host("a", rc.HostConverged, t3)}}})

	stored, err := st.ActivationTimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := store.ActivationTime{Host: "a", Typical: 3 * time.Minute, Samples: 2, MeasuredAt: t3}
	if len(stored) != 1 || stored["a"] != want {
		t.Fatalf("stored %+v, want only %+v", stored, want)
	}
	m := f.modelNow()
	if m.Activation != 3*time.Minute || m.Hosts["a"].Activation != 3*time.Minute || len(m.Hosts) != 1 {
		t.Errorf("model: activation %s, hosts %+v", m.Activation, m.Hosts)
	}

	// Another forecaster (a replica that leads next) starts from the
	// store's times.
	g := newForecaster(st, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), rc.Model{}, &kept.Keeper{})
	g.learn(ctx, nil)
	if m := g.modelNow(); m.Hosts["a"].Activation != 3*time.Minute {
		t.Errorf("a new leader's model: %+v", m.Hosts)
	}
}
