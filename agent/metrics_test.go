package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nixfleet/nixfleet/proto"
)

// readMetrics parses a metrics file as node-exporter does (the text
// format, names valid in the classic scheme) into series → value, a
// series written `name{label="value",…}` with its labels sorted.
func readMetrics(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(f)
	if err != nil {
		return nil, err
	}
	series := map[string]float64{}
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			slices.Sort(labels)
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				series[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				series[key] = m.GetGauge().GetValue()
			default:
				return nil, fmt.Errorf("%s: unexpected type %s", name, mf.GetType())
			}
		}
	}
	return series, nil
}

// zeroMetrics are the series of an agent that did nothing yet, with these
// info labels.
func zeroMetrics(current, booted, target string) map[string]float64 {
	m := map[string]float64{
		fmt.Sprintf("nixfleet_agent_info{booted=%q,current=%q,target=%q}", booted, current, target): 1,
		"nixfleet_agent_last_checkin_timestamp_seconds":                                             0,
		"nixfleet_agent_checkin_failures_total":                                                     0,
		"nixfleet_agent_rollbacks_total":                                                            0,
	}
	for _, o := range []string{"started", "confirmed", "failed", "deferred", "rolled_back", "manifest_rejected", "boot_failed"} {
		m[`nixfleet_agent_activations_total{outcome="`+o+`"}`] = 0
	}
	for _, r := range []string{"fetched", "failed", "cancelled"} {
		m[`nixfleet_agent_prefetches_total{result="`+r+`"}`] = 0
	}
	return m
}

// TestMetricsFile: every series is in the file from the first write, the
// counters at 0; what the agent notes shows in the next write; the file
// is replaced whole, readable by node-exporter's user, and no temporary
// file stays beside it.
func TestMetricsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "nixfleet-agent.prom")
	m := NewMetrics(path)
	check := func(what string, want map[string]float64) {
		t.Helper()
		if err := m.Write(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, err := readMetrics(path)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", what, d)
		}
	}
	want := zeroMetrics("", "", "")
	check("at the start", want)

	m.CheckinFailed()
	m.CheckinFailed()
	m.CheckedIn(t0.Add(1500 * time.Millisecond))
	m.Activation(proto.OutcomeStarted)
	m.Activation(proto.OutcomeFailed)
	m.RollbackBegun()
	m.Activation(proto.OutcomeRolledBack)
	m.Prefetch(prefetchFetched)
	m.SetInfo(filepath.Base(v1), filepath.Base(v1), filepath.Base(v2))
	want = zeroMetrics(filepath.Base(v1), filepath.Base(v1), filepath.Base(v2))
	want["nixfleet_agent_checkin_failures_total"] = 2
	want["nixfleet_agent_last_checkin_timestamp_seconds"] = float64(t0.Unix()) + 1.5
	want["nixfleet_agent_rollbacks_total"] = 1
	want[`nixfleet_agent_activations_total{outcome="started"}`] = 1
	want[`nixfleet_agent_activations_total{outcome="failed"}`] = 1
	want[`nixfleet_agent_activations_total{outcome="rolled_back"}`] = 1
	want[`nixfleet_agent_prefetches_total{result="fetched"}`] = 1
	// The old info series goes: one info series at a time.
	check("after a failed activation", want)

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644: node-exporter runs as another user", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "nixfleet-agent.prom" {
		t.Errorf("the directory holds %v, want the file alone", entries)
	}

	// Rewritten while read: every read is one whole file.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stop)
		for range 200 {
			m.CheckinFailed()
			if err := m.Write(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for done := false; !done; reads++ {
		select {
		case <-stop:
			done = true
		default:
		}
		got, err := readMetrics(path)
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		if len(got) != len(want) {
			t.Fatalf("read %d: %d series, want %d: a file half written", reads, len(got), len(want))
		}
	}
	wg.Wait()
	if got, _ := readMetrics(path); got["nixfleet_agent_checkin_failures_total"] != 202 {
		t.Errorf("checkin failures %v, want 202", got["nixfleet_agent_checkin_failures_total"])
	}

	// A directory that is not there: an error, nothing written.
	if err := NewMetrics(filepath.Join(dir, "missing", "x.prom")).Write(); err == nil {
		t.Error("writing into a missing directory did not fail")
	}
	// No metrics file: nothing, no error.
	var none *Metrics
	none.CheckinFailed()
	if err := none.Write(); err != nil {
		t.Error(err)
	}
}

// TestAgentMetrics runs the agent against a scripted control plane with
// a CI-signed manifest, writing its metrics file: a dispatch that
// switches and is confirmed, and one whose switch fails and is rolled
// back, show in the file written after them; a file that cannot be
// written does not stop the agent.
func TestAgentMetrics(t *testing.T) {
	t.Parallel()
	id, body, sig, roots := signedRollout(t)
	target := &proto.Target{Kind: proto.TargetDispatch, RolloutID: id, Closure: filepath.Base(v2), WaveIndex: 1, Token: "tok-2",
		ConfirmBy: t0.Add(5 * time.Minute).Format(time.RFC3339)}
	told := answer{resp: proto.CheckinResponse{Target: target}}
	v2n := filepath.Base(v2)
	for _, tc := range []struct {
		name      string
		switchErr error
		dir       string // of the metrics file, under the test's
		want      map[string]float64
		// on: the host's system at the end.
		on string
	}{
		{name: "switched and confirmed", on: v2,
			want: map[string]float64{`nixfleet_agent_activations_total{outcome="started"}`: 1,
				`nixfleet_agent_activations_total{outcome="confirmed"}`: 1}},
		{name: "the switch failed: rolled back", switchErr: errors.New("switch-to-configuration: exit 4"), on: v1,
			want: map[string]float64{`nixfleet_agent_activations_total{outcome="started"}`: 1,
				`nixfleet_agent_activations_total{outcome="failed"}`: 1, `nixfleet_agent_activations_total{outcome="rolled_back"}`: 1,
				"nixfleet_agent_rollbacks_total": 1}},
		{name: "the file cannot be written: the agent goes on", dir: "missing", on: v2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), tc.dir, "nixfleet-agent.prom")
			w := &pfWorld{current: v1, id: id, body: body, sig: sig, switches: true, switchErr: tc.switchErr, metrics: path,
				script: []answer{told, told}}
			_, st := w.run(t, idle(), roots)
			if st.Phase != PhaseIdle || st.Done != "tok-2" || w.Current() != tc.on {
				t.Fatalf("phase %s, done %q, on %s; want idle, tok-2, on %s", st.Phase, st.Done, w.Current(), tc.on)
			}
			got, err := readMetrics(path)
			if tc.dir != "" {
				if !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a metrics file in a missing directory: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			on := filepath.Base(tc.on)
			want := zeroMetrics(on, on, v2n)
			// Two check-ins answered, the second a second after the
			// first (an answer with nothing left to do); the third ends
			// the run.
			want["nixfleet_agent_last_checkin_timestamp_seconds"] = float64(t0.Add(time.Second).Unix())
			for k, v := range tc.want {
				want[k] = v
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("metrics (-want +got):\n%s", d)
			}
		})
	}
}
