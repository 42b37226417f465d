package controlplane_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nixfleet/nixfleet/controlplane"
	"github.com/nixfleet/nixfleet/controlplane/notify"
	"github.com/nixfleet/nixfleet/internal/testkit/promtest"
	"github.com/nixfleet/nixfleet/internal/testkit/sinktest"
)

// monitoringDir holds the alerting rules operators load into Prometheus.
const monitoringDir = "../monitoring"

// TestMonitoringRules: the alerting rules of monitoring/ load (promtool
// check rules) and pass their unit tests (promtool test rules), the
// Grafana dashboard is well formed (dashboardQueries), and every
// nixfleet_ series the rules and the dashboard's queries name is one a
// running control plane exports: scraped from one with a notification
// sink, after its hosts onboarded and a push it refused, each is a family
// on /metrics.
func TestMonitoringRules(t *testing.T) {
	t.Parallel()
	tool := promtest.Tool(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = monitoringDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rules, err := os.ReadFile(filepath.Join(monitoringDir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	named := seriesNamed(string(rules))
	if len(named) < 8 {
		t.Fatalf("the rules name %d nixfleet series: %v", len(named), named)
	}
	exprs := dashboardQueries(t, filepath.Join(monitoringDir, "dashboard.json"))
	fromDashboard := seriesNamed(strings.Join(exprs, "\n"))
	if len(fromDashboard) < 15 {
		t.Fatalf("the dashboard's %d queries name %d nixfleet series: %v", len(exprs), len(fromDashboard), fromDashboard)
	}
	for _, name := range fromDashboard {
		if !slices.Contains(named, name) {
			named = append(named, name)
		}
	}

	sink := sinktest.New(t, "", nil)
	e := newEnv(t, "sqlite", smallSpec(), func(c *controlplane.Config) {
		c.Notifications = []notify.Sink{{Name: "chat", URL: sink.URL}}
	})
	e.onboard(e.hosts())
	// The leader's last tick, as its series show it: the rollout the hosts
	// converged in, and its channel out of partial visibility.
	e.tick()
	want := map[string]float64{`nixfleet_rollouts{state="Converged"}`: 1, `nixfleet_rollouts{state="Active"}`: 0,
		`nixfleet_rollouts{state="Halted"}`: 0, `nixfleet_partial_visibility{channel="stable"}`: 0}
	var wrong []string
	report := func(what string, problems *[]string) {
		if t.Failed() {
			t.Logf("%s: %s", what, strings.Join(*problems, "; "))
		}
	}
	defer report("the leader's series", &wrong)
	// The series are set once the tick's commit is handed out.
	e.await(10*time.Second, "the leader's series after its tick", func() bool {
		m := e.metrics()
		wrong = wrong[:0]
		for series, v := range want {
			if got, ok := m[series]; !ok || got != v {
				wrong = append(wrong, fmt.Sprintf("%s is %v (present %v), want %v", series, got, ok, v))
			}
		}
		return len(wrong) == 0
	})
	// A push CI did not sign: refused.
	if err := e.repo.WriteFile(filepath.Join("releases", "fleet.resolved.json.sig"), []byte("not a signature")); err != nil {
		t.Fatal(err)
	}
	commit, err := e.repo.Commit("unsigned", e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.repo.Promote("stable", commit); err != nil {
		t.Fatal(err)
	}
	e.hook()
	var missing []string
	defer report("named but not exported", &missing)
	e.await(10*time.Second, "every series the rules and the dashboard name on /metrics", func() bool {
		exported := families(e.metricsText())
		missing = missing[:0]
		for _, name := range named {
			if !exported[name] {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0
	})
}

// dashboard is what a Grafana dashboard's JSON must hold for Grafana to
// import it and for its panels to query the data source it asks for.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// dashboardQueries checks what Grafana needs to import a dashboard and
// run its panels: a title, a uid, a current schema version, a datasource
// variable, panels with unique ids, known types and places inside the
// 24-column grid, each querying the ${datasource} Prometheus. It returns
// the panels' queries.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 30 || len(d.Panels) == 0 {
		t.Fatalf("%s: title %q, uid %q, schemaVersion %d, %d panels", path, d.Title, d.UID, d.SchemaVersion, len(d.Panels))
	}
	if !slices.ContainsFunc(d.Templating.List, func(v struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}) bool {
		return v.Name == "datasource" && v.Type == "datasource"
	}) {
		t.Errorf("%s: no datasource variable", path)
	}
	ids := map[int]bool{}
	var exprs []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("%s: panel id %d twice", path, p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
			t.Errorf("%s: panel %q at %+v, outside the 24-column grid", path, p.Title, g)
		}
		switch p.Type {
		case "row":
			continue
		case "stat", "timeseries", "gauge", "table", "bargauge":
		default:
			t.Errorf("%s: panel %q of type %q", path, p.Title, p.Type)
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("%s: panel %q does not query the ${datasource} Prometheus", path, p.Title)
		}
		for _, q := range p.Targets {
			if q.RefID == "" || q.Expr == "" {
				t.Errorf("%s: panel %q has a query without refId or expr", path, p.Title)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	return exprs
}

// seriesNamed returns the nixfleet_ series an expression text names, the
// histograms' by their family (without _bucket, _sum or _count).
func seriesNamed(text string) []string {
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.Contains(line, "summary:") {
			continue
		}
		for _, name := range regexp.MustCompile(`\bnixfleet_[a-z0-9_]+`).FindAllString(line, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			if !seen[name] {
				seen[name] = true
				out = append(out, name)
			}
		}
	}
	return out
}

// families returns the metric families of a /metrics text: those with a
// HELP line, which a family gets once it has a series.
func families(text string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, _, _ := strings.Cut(rest, " ")
			out[name] = true
		}
	}
	return out
}
