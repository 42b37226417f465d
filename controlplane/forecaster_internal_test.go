package controlplane

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
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
		samples, reboots := f.samples, f.reboots
		f.samples, f.reboots = nil, nil
		f.mu.Unlock()
		f.learn(ctx, samples)
		f.learnReboots(reboots)
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
	if m.Activation != 3*time.Minute || m.Hosts["a"].Activation != 3*time.Minute || len(m.Hosts) != 1 || m.Reboot != 0 {
		t.Errorf("model: activation %s, hosts %+v, reboot %s", m.Activation, m.Hosts, m.Reboot)
	}

	// Reboots (rule 17): order to the new boot's confirm, into Soaking
	// only; a failed boot, and one ordered while another replica led,
	// are not measured. The model takes their median.
	t4 := t3.Add(time.Hour)
	tick(t4, []string{"r3"}, rc.Output{Hosts: []rc.HostUpdate{
		{RolloutID: "r3", From: rc.HostDeferred, Host: host("e", rc.HostRebooting, t4)},
		{RolloutID: "r3", From: rc.HostDeferred, Host: host("f", rc.HostRebooting, t4)},
		{RolloutID: "r3", From: rc.HostDeferred, Host: host("g", rc.HostRebooting, t4)},
		{RolloutID: "r3", From: rc.HostDeferred, Host: host("h", rc.HostRebooting, t4)},
	}})
	tick(t4.Add(3*time.Minute), []string{"r3"}, rc.Output{Hosts: []rc.HostUpdate{
		{RolloutID: "r3", From: rc.HostRebooting, Host: host("e", rc.HostSoaking, t4.Add(3*time.Minute))},
		{RolloutID: "r3", From: rc.HostRebooting, Host: host("f", rc.HostFailed, t4.Add(3*time.Minute))},
		{RolloutID: "r3", From: rc.HostRebooting, Host: host("x", rc.HostSoaking, t4.Add(3*time.Minute))},
	}})
	tick(t4.Add(9*time.Minute), []string{"r3"}, rc.Output{Hosts: []rc.HostUpdate{
		{RolloutID: "r3", From: rc.HostRebooting, Host: host("g", rc.HostSoaking, t4.Add(9*time.Minute))},
		{RolloutID: "r3", From: rc.HostRebooting, Host: host("h", rc.HostSoaking, t4.Add(10*time.Minute))},
	}})
	if got, want := f.rebootTimes, []time.Duration{3 * time.Minute, 9 * time.Minute, 10 * time.Minute}; !slices.Equal(got, want) {
		t.Errorf("reboots measured %v, want %v", got, want)
	}
	if m := f.modelNow(); m.Reboot != 9*time.Minute {
		t.Errorf("model: reboot %s, want the median 9m0s", m.Reboot)
	}

	// Another forecaster (a replica that leads next) starts from the
	// store's times.
	g := newForecaster(st, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), rc.Model{}, &kept.Keeper{})
	g.learn(ctx, nil)
	if m := g.modelNow(); m.Hosts["a"].Activation != 3*time.Minute {
		t.Errorf("a new leader's model: %+v", m.Hosts)
	}
}

// TestForecasterRests: a forecast due while the forecasting loop rests
// after the last one (forecastRest) waits; the loop takes it only once
// the rest is over, and a replica shutting down does not wait for the
// rest.
func TestForecasterRests(t *testing.T) {
	f := newForecaster(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), newMetrics(), rc.Model{}, &kept.Keeper{})
	f.loaded = true // no store to read times from
	f.restUntil = time.Now().Add(time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	f.kick(ctx) // pending: no forecast made yet
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	pending, running := f.pending, f.running
	f.mu.Unlock()
	if !pending || !running {
		t.Fatalf("pending %v, running %v: the loop took a forecast while it rested", pending, running)
	}
	cancel()
	f.wait()
	if f.running || !f.pending {
		t.Fatalf("after shutdown: running %v, pending %v", f.running, f.pending)
	}

	// Rested: the loop takes what is due (with no kept input it stops,
	// and the next tick kicks again).
	f.restUntil = time.Now()
	f.kick(context.Background())
	f.wait()
	if f.pending || f.running {
		t.Fatalf("after the rest: pending %v, running %v", f.pending, f.running)
	}
}
