package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The demo's services report an error ratio, and its policies judge each
// wave by it (rfcs/0001 §2.3): an analysis asks, once per wave, that the
// worst ratio of the wave's hosts stay under 2%.
const (
	ratioMetric  = "demo_http_error_ratio"
	analysisName = "error-ratio"
	// analysisQuery is the only query the stand-in answers.
	analysisQuery = `max(` + ratioMetric + `{host=~"{{ .HostsRegex }}"})`
)

// serviceMetrics is the demo's stand-in for the monitoring of its
// services, so that the demo needs no Prometheus: it serves the hosts'
// error ratios in the Prometheus text format (GET /metrics), and answers
// the Prometheus query API (POST or GET /api/v1/query) for the one query
// the demo's analysis sends, max(demo_http_error_ratio{host=~"…"}), as a
// Prometheus scraping /metrics does: TestStandInAnswersAsPrometheus
// compares the two. Any other query is refused as Prometheus refuses a
// bad one (400, status error, errorType bad_data).
type serviceMetrics struct {
	// ratio is a host's error ratio now; hosts are the hosts.
	ratio func(host string) float64
	hosts []string

	srv *http.Server
	url string
	wg  sync.WaitGroup
}

// queryRE reads the analysis query: its one argument is a PromQL string.
var queryRE = regexp.MustCompile(`^\s*max\(\s*` + ratioMetric + `\{host=~("(?:[^"\\]|\\.)*")\}\s*\)\s*$`)

// startServiceMetrics serves the stand-in on a free loopback port.
func startServiceMetrics(hosts []string, ratio func(string) float64) (*serviceMetrics, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m := &serviceMetrics{ratio: ratio, hosts: slices.Sorted(slices.Values(hosts)), url: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", m.metrics)
	mux.HandleFunc("/api/v1/query", m.query)
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	m.wg.Add(1)
	go func() { defer m.wg.Done(); _ = m.srv.Serve(ln) }()
	return m, nil
}

// stop stops serving.
func (m *serviceMetrics) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = m.srv.Shutdown(ctx)
	m.wg.Wait()
}

func (m *serviceMetrics) metrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP %s Share of the host's HTTP requests that failed.\n# TYPE %s gauge\n", ratioMetric, ratioMetric)
	for _, h := range m.hosts {
		fmt.Fprintf(w, "%s{host=%q} %s\n", ratioMetric, h, strconv.FormatFloat(m.ratio(h), 'f', -1, 64))
	}
}

func (m *serviceMetrics) query(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		badData(w, err.Error())
		return
	}
	q := r.Form.Get("query")
	match := queryRE.FindStringSubmatch(q)
	if match == nil {
		badData(w, fmt.Sprintf("the demo's stand-in answers only max(%s{host=~\"…\"}), not %q", ratioMetric, q))
		return
	}
	pattern, err := strconv.Unquote(match[1])
	if err != nil {
		badData(w, "the label matcher's string: "+err.Error())
		return
	}
	re, err := regexp.Compile("^(?:" + pattern + ")$")
	if err != nil {
		badData(w, "the label matcher's regex: "+err.Error())
		return
	}
	at := float64(time.Now().UnixMilli()) / 1000
	if t := r.Form.Get("time"); t != "" {
		if at, err = strconv.ParseFloat(t, 64); err != nil {
			badData(w, "time: "+err.Error())
			return
		}
	}
	result := []any{}
	found, worst := false, 0.0
	for _, h := range m.hosts {
		if re.MatchString(h) {
			if v := m.ratio(h); !found || v > worst {
				worst = v
			}
			found = true
		}
	}
	if found {
		result = append(result, map[string]any{"metric": map[string]string{},
			"value": []any{at, strconv.FormatFloat(worst, 'f', -1, 64)}})
	}
	writeAPI(w, http.StatusOK, map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
}

func badData(w http.ResponseWriter, msg string) {
	writeAPI(w, http.StatusBadRequest, map[string]any{"status": "error", "errorType": "bad_data", "error": strings.TrimSpace(msg)})
}

func writeAPI(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
