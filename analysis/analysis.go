// Package analysis judges a wave by its services (rfcs/0001 §2.3,
// rfcs/0003 rule 16): what a health gate's analysis may say, the query a
// measurement of one wave sends to Prometheus, and what its result means.
//
// It is pure: no clock, no I/O, no randomness. The control plane sends the
// queries and records what came back; the reconciler judges every
// measurement with Judge and counts the outcomes of a run.
//
// An analysis is checked in this order, each problem reported once:
//
//  1. the query is not empty, at most MaxQueryBytes long, and its
//     placeholders are known ones ({{ .HostsRegex }}, {{ .RolloutID }},
//     {{ .Channel }}, {{ .Wave }}; spaces inside the braces optional), with
//     no "{{" or "}}" outside one;
//  2. successCondition, and failureCondition when given, read "result <op>
//     <number>" with <op> one of <, <=, >, >=, ==, !=;
//  3. interval is a whole number of seconds, minutes or hours, at most a
//     day;
//  4. count is from 1 to proto.MaxAnalysisCount; the limits are not
//     negative;
//  5. source, when given, is a Prometheus source name
//     (proto.ValidSourceName);
//  6. compare, when given: confidence is a decimal number (written as
//     the conditions write one) from 0.5 to 0.999, effect one of at
//     least 0; minSamples is from proto.MinComparisonSamples to
//     proto.MaxComparisonSamples; step and window are written as interval
//     is, step at most window and window at most
//     proto.MaxComparisonPoints steps; worse is "higher" or "lower";
//     baselineTags has at most proto.MaxBaselineTags tags, none empty; and
//     the query selects hosts by {{ .HostsRegex }} (a comparison fills it
//     in once for each group). successCondition stays required: it judges
//     a wave with no baseline left (the last wave).
package analysis

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// MaxQueryBytes bounds a query as the policy writes it.
const MaxQueryBytes = 4096

// MaxInterval is the longest time between two measurements.
const MaxInterval = 24 * time.Hour

// Outcome is what a measurement, or a whole run, came to.
type Outcome string

// Outcomes. Running is a run's only: it has not ended yet.
const (
	Successful   Outcome = "successful"
	Failed       Outcome = "failed"
	Inconclusive Outcome = "inconclusive"
	Running      Outcome = "running"
)

// Placeholders are the names a query may use, in the order messages list
// them.
var Placeholders = []string{"HostsRegex", "RolloutID", "Channel", "Wave"}

var (
	placeholderRE = regexp.MustCompile(`\{\{ *\.([A-Za-z]+) *\}\}`)
	conditionRE   = regexp.MustCompile(`^ *result *(<=|>=|==|!=|<|>) *(` + number + `) *$`)
	numberRE      = regexp.MustCompile(`^` + number + `$`)
	intervalRE    = regexp.MustCompile(`^([1-9][0-9]{0,5})(s|m|h)$`)
)

// number is a decimal number of at most 15 digits before and after the
// point and an exponent of at most two: always finite, and a float64
// reads it.
const number = `-?([0-9]{1,15}(\.[0-9]{0,15})?|\.[0-9]{1,15})([eE][+-]?[0-9]{1,2})?`

// Problems lists what is wrong with an analysis besides its name (which
// the fleet's validation checks with the other labels), in the order of
// the package comment. The messages name the member, without the
// analysis's place in the fleet. An analysis with a comparison still
// needs a successCondition: it judges a wave with no baseline left.
func Problems(a proto.Analysis) []string {
	var out []string
	switch {
	case a.Query == "":
		out = append(out, "query is empty")
	case len(a.Query) > MaxQueryBytes:
		out = append(out, fmt.Sprintf("query is %d bytes, more than %d", len(a.Query), MaxQueryBytes))
	default:
		out = append(out, queryProblems(a.Query)...)
	}
	if _, err := ParseCondition(a.SuccessCondition); err != nil {
		out = append(out, fmt.Sprintf("successCondition %s", err))
	}
	if a.FailureCondition != "" {
		if _, err := ParseCondition(a.FailureCondition); err != nil {
			out = append(out, fmt.Sprintf("failureCondition %s", err))
		}
	}
	if _, err := ParseInterval(a.Interval); err != nil {
		out = append(out, err.Error())
	}
	if a.Count < 1 || a.Count > proto.MaxAnalysisCount {
		out = append(out, fmt.Sprintf("count %d must be between 1 and %d", a.Count, proto.MaxAnalysisCount))
	}
	if a.FailureLimit < 0 {
		out = append(out, fmt.Sprintf("failureLimit %d is negative", a.FailureLimit))
	}
	if a.InconclusiveLimit < 0 {
		out = append(out, fmt.Sprintf("inconclusiveLimit %d is negative", a.InconclusiveLimit))
	}
	if a.Source != "" && !proto.ValidSourceName(a.Source) {
		out = append(out, SourceNameProblem(a.Source))
	}
	if a.Compare != nil {
		out = append(out, comparisonProblems(*a.Compare, a.Query)...)
	}
	return out
}

// comparisonProblems is item 6 of the package comment: the problems of
// an analysis's comparison, and of its query for a comparison (an empty
// query has been reported).
func comparisonProblems(c proto.Comparison, query string) []string {
	var out []string
	if v, ok := parseNumber(c.Confidence); !ok || v < 0.5 || v > 0.999 {
		out = append(out, fmt.Sprintf("compare.confidence %q must be a decimal number from 0.5 to 0.999", c.Confidence))
	}
	if v, ok := parseNumber(c.Effect); !ok || v < 0 {
		out = append(out, fmt.Sprintf("compare.effect %q must be a decimal number of at least 0", c.Effect))
	}
	if c.MinSamples < proto.MinComparisonSamples || c.MinSamples > proto.MaxComparisonSamples {
		out = append(out, fmt.Sprintf("compare.minSamples %d must be between %d and %d", c.MinSamples, proto.MinComparisonSamples, proto.MaxComparisonSamples))
	}
	step, stepErr := ParseInterval(c.Step)
	if stepErr != nil {
		out = append(out, "compare.step: "+stepErr.Error())
	}
	window, windowErr := ParseInterval(c.Window)
	if windowErr != nil {
		out = append(out, "compare.window: "+windowErr.Error())
	}
	if stepErr == nil && windowErr == nil {
		switch {
		case step > window:
			out = append(out, fmt.Sprintf("compare.step %s is longer than compare.window %s", c.Step, c.Window))
		case window > proto.MaxComparisonPoints*step:
			out = append(out, fmt.Sprintf("compare.window %s is more than %d steps of %s", c.Window, proto.MaxComparisonPoints, c.Step))
		}
	}
	if c.Worse != proto.WorseHigher && c.Worse != proto.WorseLower {
		out = append(out, fmt.Sprintf("compare.worse %q must be %q or %q", c.Worse, proto.WorseHigher, proto.WorseLower))
	}
	if len(c.BaselineTags) > proto.MaxBaselineTags {
		out = append(out, fmt.Sprintf("compare.baselineTags has %d tags, at most %d", len(c.BaselineTags), proto.MaxBaselineTags))
	}
	for i, tag := range c.BaselineTags {
		if tag == "" {
			out = append(out, fmt.Sprintf("compare.baselineTags[%d] is empty", i))
		}
	}
	if query != "" && !usesPlaceholder(query, "HostsRegex") {
		out = append(out, "compare: the query must select hosts by {{ .HostsRegex }}, which stands for each group's hosts")
	}
	return out
}

// parseNumber reads a decimal number as the conditions write one.
func parseNumber(s string) (float64, bool) {
	if !numberRE.MatchString(s) {
		return 0, false
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil
}

// usesPlaceholder reports whether the query has the placeholder name.
func usesPlaceholder(q, name string) bool {
	for _, m := range placeholderRE.FindAllStringSubmatch(q, -1) {
		if m[1] == name {
			return true
		}
	}
	return false
}

// SourceNameProblem says why name is not a Prometheus source name
// (proto.ValidSourceName).
func SourceNameProblem(name string) string {
	if name == proto.DefaultSource {
		return fmt.Sprintf("source %q is reserved: leave source out to query the control plane's default Prometheus", name)
	}
	return fmt.Sprintf("source %q must be 1 to %d of a-z, 0-9, '_' and '-', starting with a letter or digit", name, proto.MaxSourceNameLen)
}

// queryProblems reports unknown placeholders, once each in the order they
// first appear, then braces outside a placeholder.
func queryProblems(q string) []string {
	var out []string
	var seen []string
	for _, m := range placeholderRE.FindAllStringSubmatch(q, -1) {
		if name := m[1]; !slices.Contains(Placeholders, name) && !slices.Contains(seen, name) {
			seen = append(seen, name)
			out = append(out, fmt.Sprintf("query: {{ .%s }} is not a placeholder (known: %s)", name, knownPlaceholders()))
		}
	}
	rest := placeholderRE.ReplaceAllString(q, "")
	if strings.Contains(rest, "{{") || strings.Contains(rest, "}}") {
		out = append(out, `query: "{{" or "}}" outside a placeholder`)
	}
	return out
}

func knownPlaceholders() string {
	names := make([]string, len(Placeholders))
	for i, p := range Placeholders {
		names[i] = "." + p
	}
	return strings.Join(names, ", ")
}

// Condition is a parsed "result <op> <number>".
type Condition struct {
	Op    string
	Value float64
}

// ParseCondition reads "result <op> <number>".
func ParseCondition(s string) (Condition, error) {
	m := conditionRE.FindStringSubmatch(s)
	if m == nil {
		return Condition{}, fmt.Errorf(`%q is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=`, s)
	}
	v, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return Condition{}, fmt.Errorf("%q: %w", s, err)
	}
	return Condition{Op: m[1], Value: v}, nil
}

// Holds reports whether a value meets the condition. NaN meets none.
func (c Condition) Holds(v float64) bool {
	switch c.Op {
	case "<":
		return v < c.Value
	case "<=":
		return v <= c.Value
	case ">":
		return v > c.Value
	case ">=":
		return v >= c.Value
	case "==":
		return v == c.Value
	case "!=":
		return v != c.Value && !math.IsNaN(v)
	}
	return false
}

// String writes the condition as a policy does.
func (c Condition) String() string {
	return "result " + c.Op + " " + strconv.FormatFloat(c.Value, 'g', -1, 64)
}

// ParseInterval reads an analysis interval: "30s", "5m", "1h".
func ParseInterval(s string) (time.Duration, error) {
	m := intervalRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf(`interval %q is not a whole number of seconds, minutes or hours like "30s", "5m" or "1h"`, s)
	}
	n, _ := strconv.Atoi(m[1])
	unit := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	d := time.Duration(n) * unit
	if d > MaxInterval {
		return 0, fmt.Errorf("interval %q is longer than %s", s, "24h")
	}
	return d, nil
}

// Vars are what a query's placeholders stand for, for one wave of one
// rollout.
type Vars struct {
	// Hosts are the wave's host names.
	Hosts     []string
	RolloutID string
	Channel   string
	Wave      int
}

// Render fills a query's placeholders. Every value is written to stand
// between the double quotes of a PromQL string, so that
// host=~"{{ .HostsRegex }}" matches the wave's hosts and nothing else:
// HostsRegex is the hosts' names, sorted, each quoted for a regular
// expression, joined with "|" (PromQL anchors a label regex at both ends).
// A wave without hosts matches nothing ("$^"). Unknown placeholders are
// left as they are (Problems refuses them).
func Render(query string, v Vars) string {
	return placeholderRE.ReplaceAllStringFunc(query, func(m string) string {
		switch placeholderRE.FindStringSubmatch(m)[1] {
		case "HostsRegex":
			return promString(hostsRegex(v.Hosts))
		case "RolloutID":
			return promString(v.RolloutID)
		case "Channel":
			return promString(v.Channel)
		case "Wave":
			return strconv.Itoa(v.Wave)
		}
		return m
	})
}

func hostsRegex(hosts []string) string {
	if len(hosts) == 0 {
		return "$^"
	}
	hs := slices.Clone(hosts)
	slices.Sort(hs)
	for i, h := range hs {
		hs[i] = regexp.QuoteMeta(h)
	}
	return strings.Join(slices.Compact(hs), "|")
}

// promString escapes s for the inside of a double-quoted PromQL string.
func promString(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// Judge says what one measurement means: the query's samples, or the
// error that left none (queryErr). An error, an empty result or a value
// that is not a number is inconclusive; a sample that meets
// failureCondition fails it; every sample meeting successCondition makes
// it successful; anything else fails, or is inconclusive when
// failureCondition is given (it did not fail, and did not succeed). The
// message says why, for people: the value(s) and the condition.
func Judge(a proto.Analysis, samples []proto.MetricSample, queryErr string) (Outcome, string) {
	if queryErr != "" {
		return Inconclusive, "no result: " + queryErr
	}
	if len(samples) == 0 {
		return Inconclusive, "no data: the query returned no series"
	}
	success, err := ParseCondition(a.SuccessCondition)
	if err != nil {
		return Inconclusive, "successCondition " + err.Error()
	}
	var failure *Condition
	if a.FailureCondition != "" {
		c, err := ParseCondition(a.FailureCondition)
		if err != nil {
			return Inconclusive, "failureCondition " + err.Error()
		}
		failure = &c
	}
	values := make([]float64, len(samples))
	for i, s := range samples {
		v, err := strconv.ParseFloat(s.Value, 64)
		if err != nil || math.IsNaN(v) {
			return Inconclusive, fmt.Sprintf("%s is not a number", describe(samples[i:i+1]))
		}
		values[i] = v
	}
	if failure != nil {
		for i, v := range values {
			if failure.Holds(v) {
				return Failed, fmt.Sprintf("%s meets the failure condition %s", describe(samples[i:i+1]), failure)
			}
		}
	}
	for i, v := range values {
		if !success.Holds(v) {
			if failure != nil {
				return Inconclusive, fmt.Sprintf("%s meets neither %s nor the failure condition %s", describe(samples[i:i+1]), success, failure)
			}
			return Failed, fmt.Sprintf("%s does not meet %s", describe(samples[i:i+1]), success)
		}
	}
	return Successful, fmt.Sprintf("%s meets %s", describe(samples), success)
}

// describe writes samples for a message: a lone value, or up to three
// series with their labels and how many more there are.
func describe(samples []proto.MetricSample) string {
	if len(samples) == 1 && samples[0].Metric == "" {
		return samples[0].Value
	}
	var parts []string
	for _, s := range samples[:min(len(samples), 3)] {
		parts = append(parts, strings.TrimSpace(s.Metric+" "+s.Value))
	}
	out := strings.Join(parts, ", ")
	if n := len(samples) - 3; n > 0 {
		out += fmt.Sprintf(" and %d more series", n)
	}
	return out
}
