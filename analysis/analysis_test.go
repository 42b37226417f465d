package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

func good() proto.Analysis {
	return proto.Analysis{Name: "error-rate", Query: `sum(rate(errors{host=~"{{ .HostsRegex }}", rollout="{{.RolloutID}}"}[5m]))`,
		SuccessCondition: "result < 0.05", Interval: "1m", Count: 5}
}

func TestProblems(t *testing.T) {
	t.Parallel()
	if p := Problems(good()); len(p) != 0 {
		t.Fatalf("a good analysis: %q", p)
	}
	for _, tc := range []struct {
		name   string
		change func(*proto.Analysis)
		want   []string
	}{
		{"no query", func(a *proto.Analysis) { a.Query = "" }, []string{"query is empty"}},
		{"huge query", func(a *proto.Analysis) { a.Query = strings.Repeat("x", MaxQueryBytes+1) },
			[]string{"query is 4097 bytes, more than 4096"}},
		{"unknown placeholders, once each", func(a *proto.Analysis) { a.Query = "{{ .Hosts }} {{.Region}} {{ .Hosts }}" },
			[]string{"query: {{ .Hosts }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)",
				"query: {{ .Region }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)"}},
		{"stray braces", func(a *proto.Analysis) { a.Query = `up{host=~"{{ .HostsRegex"}` }, []string{`query: "{{" or "}}" outside a placeholder`}},
		{"template logic", func(a *proto.Analysis) { a.Query = `{{ range .Hosts }}x{{ end }}` }, []string{`query: "{{" or "}}" outside a placeholder`}},
		{"bad success condition", func(a *proto.Analysis) { a.SuccessCondition = "result[0] >= 0.95" },
			[]string{`successCondition "result[0] >= 0.95" is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=`}},
		{"bad failure condition", func(a *proto.Analysis) { a.FailureCondition = "result > lots" },
			[]string{`failureCondition "result > lots" is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=`}},
		{"interval without a unit", func(a *proto.Analysis) { a.Interval = "60" },
			[]string{`interval "60" is not a whole number of seconds, minutes or hours like "30s", "5m" or "1h"`}},
		{"interval of zero", func(a *proto.Analysis) { a.Interval = "0s" },
			[]string{`interval "0s" is not a whole number of seconds, minutes or hours like "30s", "5m" or "1h"`}},
		{"interval over a day", func(a *proto.Analysis) { a.Interval = "25h" }, []string{`interval "25h" is longer than 24h`}},
		{"no count", func(a *proto.Analysis) { a.Count = 0 }, []string{"count 0 must be between 1 and 1000"}},
		{"negative limits", func(a *proto.Analysis) { a.FailureLimit, a.InconclusiveLimit = -1, -2 },
			[]string{"failureLimit -1 is negative", "inconclusiveLimit -2 is negative"}},
		{"a source", func(a *proto.Analysis) { a.Source = "team-a_2" }, nil},
		{"a source of 63 characters", func(a *proto.Analysis) { a.Source = strings.Repeat("a", 63) }, nil},
		{"a source of 64 characters", func(a *proto.Analysis) { a.Source = strings.Repeat("a", 64) },
			[]string{`source "` + strings.Repeat("a", 64) + `" must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit`}},
		{"a source in capitals", func(a *proto.Analysis) { a.Source = "Team-A" },
			[]string{`source "Team-A" must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit`}},
		{"a source starting with a dash", func(a *proto.Analysis) { a.Source = "-a" },
			[]string{`source "-a" must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit`}},
		{"the default source by name", func(a *proto.Analysis) { a.Source = "default" },
			[]string{`source "default" is reserved: leave source out to query the control plane's default Prometheus`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := good()
			tc.change(&a)
			if diff := cmp.Diff(tc.want, Problems(a)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

// comparing is good() with a comparison as mkFleet writes its defaults.
func comparing() proto.Analysis {
	a := good()
	a.Compare = &proto.Comparison{Confidence: "0.95", Effect: "0", MinSamples: 10, Step: "30s", Window: "10m", Worse: proto.WorseHigher}
	return a
}

func TestComparisonProblems(t *testing.T) {
	t.Parallel()
	const (
		notStep   = `compare.step: interval "%s" is not a whole number of seconds, minutes or hours like "30s", "5m" or "1h"`
		notWindow = `compare.window: interval "%s" is not a whole number of seconds, minutes or hours like "30s", "5m" or "1h"`
		noHosts   = "compare: the query must select hosts by {{ .HostsRegex }}, which stands for each group's hosts"
	)
	for _, tc := range []struct {
		name   string
		change func(*proto.Comparison, *proto.Analysis)
		want   []string
	}{
		{"the defaults", func(*proto.Comparison, *proto.Analysis) {}, nil},
		{"the bounds", func(c *proto.Comparison, _ *proto.Analysis) {
			c.Confidence, c.Effect, c.MinSamples, c.Step, c.Window, c.Worse = "0.5", "-0", proto.MinComparisonSamples, "1s", "1000s", proto.WorseLower
		}, nil},
		{"the upper bounds", func(c *proto.Comparison, _ *proto.Analysis) {
			c.Confidence, c.Effect, c.MinSamples, c.Step, c.Window = "0.999", "1e99", proto.MaxComparisonSamples, "24h", "24h"
		}, nil},
		{"numbers as conditions write them", func(c *proto.Comparison, _ *proto.Analysis) {
			c.Confidence, c.Effect = "9.9e-1", ".5"
		}, nil},
		{"a window of a day in 90s steps", func(c *proto.Comparison, _ *proto.Analysis) { c.Step, c.Window = "90s", "1440m" }, nil},
		{"placeholder without spaces", func(_ *proto.Comparison, a *proto.Analysis) { a.Query = `up{host=~"{{.HostsRegex}}"}` }, nil},
		{"eight baseline tags", func(c *proto.Comparison, _ *proto.Analysis) {
			c.BaselineTags = []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		}, nil},
		{"nine baseline tags, one empty", func(c *proto.Comparison, _ *proto.Analysis) {
			c.BaselineTags = []string{"a", "b", "", "d", "e", "f", "g", "h", "i"}
		}, []string{"compare.baselineTags has 9 tags, at most 8", "compare.baselineTags[2] is empty"}},
		{"confidence below 0.5", func(c *proto.Comparison, _ *proto.Analysis) { c.Confidence = "0.4999" },
			[]string{`compare.confidence "0.4999" must be a decimal number from 0.5 to 0.999`}},
		{"confidence above 0.999", func(c *proto.Comparison, _ *proto.Analysis) { c.Confidence = "0.9991" },
			[]string{`compare.confidence "0.9991" must be a decimal number from 0.5 to 0.999`}},
		{"confidence of 1", func(c *proto.Comparison, _ *proto.Analysis) { c.Confidence = "1" },
			[]string{`compare.confidence "1" must be a decimal number from 0.5 to 0.999`}},
		{"confidence in percent", func(c *proto.Comparison, _ *proto.Analysis) { c.Confidence = "95%" },
			[]string{`compare.confidence "95%" must be a decimal number from 0.5 to 0.999`}},
		{"confidence with a space", func(c *proto.Comparison, _ *proto.Analysis) { c.Confidence = " 0.95" },
			[]string{`compare.confidence " 0.95" must be a decimal number from 0.5 to 0.999`}},
		{"confidence with 16 decimals", func(c *proto.Comparison, _ *proto.Analysis) { c.Confidence = "0.9500000000000000" },
			[]string{`compare.confidence "0.9500000000000000" must be a decimal number from 0.5 to 0.999`}},
		{"negative effect", func(c *proto.Comparison, _ *proto.Analysis) { c.Effect = "-0.01" },
			[]string{`compare.effect "-0.01" must be a decimal number of at least 0`}},
		{"effect not a number", func(c *proto.Comparison, _ *proto.Analysis) { c.Effect = "1ms" },
			[]string{`compare.effect "1ms" must be a decimal number of at least 0`}},
		{"too few samples", func(c *proto.Comparison, _ *proto.Analysis) { c.MinSamples = 2 },
			[]string{"compare.minSamples 2 must be between 3 and 10000"}},
		{"too many samples", func(c *proto.Comparison, _ *proto.Analysis) { c.MinSamples = 10001 },
			[]string{"compare.minSamples 10001 must be between 3 and 10000"}},
		{"step without a unit", func(c *proto.Comparison, _ *proto.Analysis) { c.Step = "30" },
			[]string{strings.ReplaceAll(notStep, "%s", "30")}},
		{"window of days", func(c *proto.Comparison, _ *proto.Analysis) { c.Window = "1d" },
			[]string{strings.ReplaceAll(notWindow, "%s", "1d")}},
		{"window over a day", func(c *proto.Comparison, _ *proto.Analysis) { c.Window = "25h" },
			[]string{`compare.window: interval "25h" is longer than 24h`}},
		{"step and window both wrong", func(c *proto.Comparison, _ *proto.Analysis) { c.Step, c.Window = "0s", "" },
			[]string{strings.ReplaceAll(notStep, "%s", "0s"), strings.ReplaceAll(notWindow, "%s", "")}},
		{"step longer than window", func(c *proto.Comparison, _ *proto.Analysis) { c.Step, c.Window = "5m", "1m" },
			[]string{"compare.step 5m is longer than compare.window 1m"}},
		{"window of 1001 steps", func(c *proto.Comparison, _ *proto.Analysis) { c.Step, c.Window = "1s", "1001s" },
			[]string{"compare.window 1001s is more than 1000 steps of 1s"}},
		{"window of 1000 and a half steps", func(c *proto.Comparison, _ *proto.Analysis) { c.Step, c.Window = "2s", "2001s" },
			[]string{"compare.window 2001s is more than 1000 steps of 2s"}},
		{"worse in capitals", func(c *proto.Comparison, _ *proto.Analysis) { c.Worse = "Higher" },
			[]string{`compare.worse "Higher" must be "higher" or "lower"`}},
		{"no worse", func(c *proto.Comparison, _ *proto.Analysis) { c.Worse = "" },
			[]string{`compare.worse "" must be "higher" or "lower"`}},
		{"query without hosts", func(_ *proto.Comparison, a *proto.Analysis) { a.Query = `sum(rate(errors{wave="{{ .Wave }}"}[5m]))` },
			[]string{noHosts}},
		{"query with a misspelt hosts placeholder", func(_ *proto.Comparison, a *proto.Analysis) { a.Query = `up{host=~"{{ .Hostsregex }}"}` },
			[]string{"query: {{ .Hostsregex }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)", noHosts}},
		{"empty query, reported once", func(_ *proto.Comparison, a *proto.Analysis) { a.Query = "" }, []string{"query is empty"}},
		{"successCondition still required", func(_ *proto.Comparison, a *proto.Analysis) { a.SuccessCondition = "" },
			[]string{`successCondition "" is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=`}},
		{"everything wrong, in order", func(c *proto.Comparison, a *proto.Analysis) {
			*c = proto.Comparison{Step: "1m", Window: "30s"}
			a.Query, a.Count = "up", 0
		}, []string{
			"count 0 must be between 1 and 1000",
			`compare.confidence "" must be a decimal number from 0.5 to 0.999`,
			`compare.effect "" must be a decimal number of at least 0`,
			"compare.minSamples 0 must be between 3 and 10000",
			"compare.step 1m is longer than compare.window 30s",
			`compare.worse "" must be "higher" or "lower"`,
			noHosts,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := comparing()
			tc.change(a.Compare, &a)
			if diff := cmp.Diff(tc.want, Problems(a)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseCondition(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]Condition{
		"result < 0.05":     {"<", 0.05},
		"result<=1":         {"<=", 1},
		"  result >= -2.5 ": {">=", -2.5},
		"result == .5":      {"==", 0.5},
		"result != 1e-3":    {"!=", 0.001},
		"result > 100.":     {">", 100},
	} {
		got, err := ParseCondition(s)
		if err != nil || got != want {
			t.Errorf("ParseCondition(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "result", "x < 1", "result = 1", "result < 1e999", "result < 0x10", "result < NaN", "result < 1 and result > 0"} {
		if _, err := ParseCondition(s); err == nil {
			t.Errorf("ParseCondition(%q) accepted", s)
		}
	}
}

func TestParseInterval(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]time.Duration{"1s": time.Second, "30s": 30 * time.Second, "5m": 5 * time.Minute, "24h": 24 * time.Hour, "1440m": 24 * time.Hour} {
		if got, err := ParseInterval(s); err != nil || got != want {
			t.Errorf("ParseInterval(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0s", "1.5m", "1d", "-1m", "1m30s", "1441m"} {
		if _, err := ParseInterval(s); err == nil {
			t.Errorf("ParseInterval(%q) accepted", s)
		}
	}
}

// TestRender: the host regex matches the wave's hosts exactly, with the
// dots of their names quoted for the regex and every backslash doubled for
// the PromQL string it stands in.
func TestRender(t *testing.T) {
	t.Parallel()
	q := `sum(up{host=~"{{ .HostsRegex }}", rollout="{{.RolloutID}}", channel="{{ .Channel }}", wave="{{ .Wave }}"})`
	got := Render(q, Vars{Hosts: []string{"web-02.example", "db-01", "web-02.example"}, RolloutID: "prod@0123abc", Channel: "prod", Wave: 2})
	want := `sum(up{host=~"db-01|web-02\\.example", rollout="prod@0123abc", channel="prod", wave="2"})`
	if got != want {
		t.Errorf("Render:\n got %s\nwant %s", got, want)
	}
	if got := Render(`up{host=~"{{ .HostsRegex }}"}`, Vars{}); got != `up{host=~"$^"}` {
		t.Errorf("no hosts: %s", got)
	}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	samples := func(vs ...string) []proto.MetricSample {
		var out []proto.MetricSample
		for i, v := range vs {
			out = append(out, proto.MetricSample{Metric: `{instance="h` + string(rune('0'+i)) + `"}`, Value: v})
		}
		return out
	}
	withFailure := good()
	withFailure.FailureCondition = "result > 0.2"
	for _, tc := range []struct {
		name    string
		a       proto.Analysis
		samples []proto.MetricSample
		err     string
		want    Outcome
		words   string
	}{
		{"meets", good(), []proto.MetricSample{{Value: "0.01"}}, "", Successful, "0.01 meets result < 0.05"},
		{"every series must meet it", good(), samples("0.01", "0.07"), "", Failed, `{instance="h1"} 0.07 does not meet result < 0.05`},
		{"all series meet it", good(), samples("0.01", "0.02", "0.03", "0.04"), "", Successful, "and 1 more series"},
		{"failure condition wins", withFailure, samples("0.01", "0.5"), "", Failed, "meets the failure condition result > 0.2"},
		{"between the conditions", withFailure, samples("0.1"), "", Inconclusive, "meets neither"},
		{"no data", good(), nil, "", Inconclusive, "no data"},
		{"query error", good(), nil, "bad_data: parse error", Inconclusive, "no result: bad_data: parse error"},
		{"NaN", good(), []proto.MetricSample{{Value: "NaN"}}, "", Inconclusive, "NaN is not a number"},
		{"+Inf fails", good(), []proto.MetricSample{{Value: "+Inf"}}, "", Failed, "+Inf does not meet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := Judge(tc.a, tc.samples, tc.err)
			if got != tc.want || !strings.Contains(msg, tc.words) {
				t.Errorf("Judge = %s, %q; want %s saying %q", got, msg, tc.want, tc.words)
			}
		})
	}
}

// FuzzProblems: any analysis is judged without a panic, and a query that
// passes the checks renders without a placeholder left.
func FuzzProblems(f *testing.F) {
	a := good()
	f.Add(a.Query, a.SuccessCondition, a.FailureCondition, a.Interval, "0.01")
	f.Add("{{ .Wave }}{{", "result<1", "result>=2e5", "24h", "NaN")
	f.Fuzz(func(t *testing.T, query, success, failure, interval, value string) {
		a := proto.Analysis{Name: "x", Query: query, SuccessCondition: success, FailureCondition: failure, Interval: interval, Count: 1}
		problems := Problems(a)
		Judge(a, []proto.MetricSample{{Value: value}}, "")
		if len(problems) == 0 {
			out := Render(query, Vars{Hosts: []string{"a.b", `c"d`}, RolloutID: "r", Channel: "c", Wave: 1})
			if strings.Contains(out, "{{") || strings.Contains(out, "}}") {
				t.Fatalf("%q passes the checks, but renders as %q", query, out)
			}
		}
	})
}
