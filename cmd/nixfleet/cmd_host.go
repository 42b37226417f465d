package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

const hostNotFoundHint = "'nixfleet host list' shows the hosts of the fleet, and those that checked in or are in a rollout"

func hostCommand() *cli.Command {
	return &cli.Command{
		Name:  "host",
		Usage: "list and inspect hosts, and explain why one is not on its target",
		Flags: connFlags(),
		Subcommands: []*cli.Command{
			opCommand(&cli.Command{
				Name:  "list",
				Usage: "every host of the fleet, and every other host that checked in or is in a rollout",
				Description: "Reads GET /v1/hosts page after page, by name. The filters match the rollout\n" +
					"that drives a host (its assignment): --rollout lists the hosts a rollout drives now.\n" +
					"A host of the fleet that no rollout drives yet (its channel's release waits on a\n" +
					"channel edge, say) is listed with ROLLOUT \"none yet\" or the waiting release, and\n" +
					"matches --channel by its channel in the fleet.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "channel", Usage: "only the hosts of `CHANNEL`"},
					&cli.StringFlag{Name: "state", Usage: "only the hosts in `STATE` (" + hostStateNames() + ")"},
					&cli.StringFlag{Name: "rollout", Usage: "only the hosts rollout `ID` drives"},
					&cli.IntFlag{Name: "limit", Usage: "at most `N` hosts, the first by name (0: every one; --json then gives next)"},
					&cli.StringFlag{Name: "after", Usage: "only the hosts after `NAME` (a --json list's next)"},
					pageSizeFlag,
				},
			}, nil, runHostList),
			opCommand(&cli.Command{Name: "show", Usage: "a host: what it reported, and its place in its rollout",
				BashComplete: completeArg(completeHostNames)}, []string{"NAME"}, runHostShow),
			opCommand(&cli.Command{
				Name:         "explain",
				Usage:        "why is this host not on its target? the gate or failure holding it, or that it is there",
				BashComplete: completeArg(completeHostNames),
				Description: "Prints the control plane's answer (GET /v1/hosts/NAME, \"explain\"): the gate\n" +
					"holding a Pending host, the reason a host failed, or that it converged.",
			}, []string{"NAME"}, runHostExplain),
		},
	}
}

func hostStateNames() string {
	names := make([]string, len(reconciler.HostStates))
	for i, s := range reconciler.HostStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func runHostList(c *cli.Context, o *operator, _ []string) error {
	state := c.String("state")
	if state != "" && !slices.Contains(reconciler.HostStates, reconciler.HostState(state)) {
		return usage(c, "--state %q is not a host state (%s)", state, hostStateNames())
	}
	if err := checkPaging(c); err != nil {
		return err
	}
	rollout, err := o.fullRolloutID(c, c.String("rollout")) // text shows it short
	if err != nil {
		return err
	}
	q := proto.HostQuery{Channel: c.String("channel"), State: state, Rollout: rollout}
	hosts, raws, next, err := listPages(c.String("after"), c.Int("limit"), c.Int("page-size"), maxHostPage, "hosts",
		func(cursor string, n int) ([]proto.HostView, json.RawMessage, string, error) {
			q.After, q.Limit = cursor, n
			p, raw, err := o.api.HostPage(c.Context, q)
			return p.Hosts, raw, p.Next, err
		})
	switch {
	case err != nil:
		return o.fail(c, err, "")
	case c.Bool("json"):
		return writeJSON(c.App.Writer, struct {
			Hosts []json.RawMessage `json:"hosts"`
			Next  string            `json:"next,omitempty"`
		}{raws, next})
	case len(hosts) == 0:
		fmt.Fprintln(c.App.Writer, "no hosts")
		return nil
	}
	t := newTable("HOST", "CHANNEL", "STATE", "SEEN", "RUNS", "TARGET", "ROLLOUT", "REASON")
	t.paint[2], t.paint[3] = o.st.state, o.st.state
	for _, h := range hosts {
		state, target := "-", "-"
		if h.Host != nil {
			state, target = h.Host.State, elideClosures(h.Host.Target)
		}
		runs := dash(elideClosures(h.Observed.Current))
		if h.Host != nil && h.Observed.Current == h.Host.Target {
			runs = "= target"
		}
		t.add(h.Hostname, dash(h.Channel), state, onlineWord(h), runs, target, rolloutColumn(h), dash(h.Explain.Code))
	}
	t.write(c.App.Writer)
	if next != "" {
		fmt.Fprintf(c.App.Writer, "more hosts follow: add --after %s\n", next)
	}
	return nil
}

// rolloutColumn is a listed host's rollout: the one that drives it, else
// for a host of the fleet the release of its channel that waits to open
// one ("prod@1234567 deferred"), else "none yet"; "-" for a host outside
// the fleet in no rollout.
func rolloutColumn(h proto.HostView) string {
	switch {
	case h.Host != nil:
		return aboutText(proto.Event{RolloutID: h.Rollout})
	case h.Release != nil:
		return shortID(h.Release.RolloutID) + " " + h.Release.Fate
	case h.Channel != "":
		return "none yet"
	}
	return "-"
}

// releaseText says what holds a release that has not opened its rollout:
// "prod@1234567 deferred by channel staging: [channel_edge] …".
func releaseText(r *proto.Release) string {
	s := shortID(r.RolloutID) + " " + r.Fate
	switch {
	case r.Fate == proto.FateWaiting && r.By != "":
		s += " for " + shortID(r.By)
	case r.Fate == proto.FateDeferred && r.By == "manifest":
		s += " by its manifest"
	case r.Fate == proto.FateDeferred && r.By != "":
		s += " by channel " + r.By
	}
	if r.Reason.Code != "" || r.Reason.Message != "" {
		s += ": " + reasonLine(r.Reason.Code, r.Reason.Message)
	}
	return s
}

// maxHostPage is the most hosts GET /v1/hosts answers at once.
const maxHostPage = 5000

func onlineWord(h proto.HostView) string {
	switch {
	case !h.Seen:
		return "never seen"
	case h.Online:
		return "online"
	}
	return "offline"
}

func runHostShow(c *cli.Context, o *operator, args []string) error {
	h, raw, err := o.api.Host(c.Context, args[0])
	if err != nil {
		return o.fail(c, err, notFoundHint(err, hostNotFoundHint))
	}
	if c.Bool("json") {
		return writeRaw(c.App.Writer, raw)
	}
	st := o.st
	f := &fields{}
	obs := h.Observed
	f.add("host", h.Hostname)
	seen := st.state(onlineWord(h))
	if h.Seen {
		seen += ", last check-in " + when(obs.LastSeen)
	}
	f.add("seen", seen)
	f.add("current", dash(obs.Current))
	f.add("booted", dash(obs.Booted))
	probes := fmt.Sprintf("%d, %d failed", obs.Probes.Total, len(obs.Probes.Failed))
	if len(obs.Probes.Failed) > 0 {
		probes += ": " + strings.Join(obs.Probes.Failed, ", ")
	}
	f.add("probes", probes)
	if len(obs.FailedUnits) > 0 {
		f.add("failed units", strings.Join(obs.FailedUnits, ", "))
	}
	if obs.Deferred {
		f.add("deferred", "a target is staged for the next boot")
	}
	if a := obs.Activation; a != nil {
		f.add("activation", activationText(a))
	}
	for _, q := range obs.Quarantine {
		f.add("quarantine", fmt.Sprintf("%s until %s", q.Closure, when(q.Until)))
	}
	if obs.Prefetched != "" {
		f.add("prefetched", obs.Prefetched)
	}
	if h.Host != nil {
		r := h.Host
		f.add("rollout", fmt.Sprintf("%s (%s)", h.Rollout, st.state(h.RolloutState)))
		f.add("channel", h.Channel)
		f.add("state", fmt.Sprintf("%s since %s", st.state(r.State), when(r.Since)))
		f.add("wave", fmt.Sprint(r.Wave))
		f.add("target", r.Target)
		if r.Previous != "" {
			f.add("previous", r.Previous)
		}
		f.add("reason", reasonLine(r.Reason.Code, r.Reason.Message))
		if r.Blocked.Gate != "" || r.Blocked.Code != "" {
			f.add("held", "by "+gateText(r.Blocked))
		}
	} else {
		if h.Channel != "" { // a host of the fleet
			f.add("channel", h.Channel)
			f.add("rollout", "none yet")
		} else {
			f.add("rollout", "none")
		}
		if h.Release != nil {
			f.add("release", releaseText(h.Release))
		}
	}
	f.add("explain", reasonLine(h.Explain.Code, h.Explain.Message))
	f.write(c.App.Writer)
	return nil
}

// gateText is "gate G: message", with the code when it is not the gate's
// name.
func gateText(b proto.DecisionReason) string {
	gate := cmpOr(b.Gate, b.Code)
	if b.Code == "" || b.Code == gate {
		return fmt.Sprintf("gate %s: %s", gate, dash(b.Message))
	}
	return fmt.Sprintf("gate %s: %s", gate, reasonLine(b.Code, b.Message))
}

func activationText(a *proto.Activation) string {
	s := fmt.Sprintf("%s %s (%s) at %s", a.Outcome, a.Closure, a.RolloutID, when(a.At))
	if a.Detail != "" {
		s += ": " + a.Detail
	}
	return s
}

// explainView is what "host explain --json" prints (rfcs/0009): the
// server's answer, with the facts behind it.
type explainView struct {
	Hostname string `json:"hostname"`
	// OnTarget: the host is in a rollout and runs its target.
	OnTarget bool `json:"onTarget"`
	// Code and Message are the control plane's explanation: the host's
	// situation now. Moves says whether it changes without an operator,
	// Next what an operator can do, Until when it is expected to end.
	Code    string     `json:"code"`
	Message string     `json:"message"`
	Moves   bool       `json:"moves"`
	Next    string     `json:"next,omitempty"`
	Until   *time.Time `json:"until,omitempty"`
	Online  bool       `json:"online"`
	Seen    bool       `json:"seen"`
	// The host's place in the rollout that drives it; absent when none
	// (a host of the fleet in no rollout has its channel there).
	Rollout      string `json:"rollout,omitempty"`
	Channel      string `json:"channel,omitempty"`
	RolloutState string `json:"rolloutState,omitempty"`
	State        string `json:"state,omitempty"`
	Wave         *int   `json:"wave,omitempty"`
	Target       string `json:"target,omitempty"`
	Current      string `json:"current,omitempty"`
	// Prefetched is the closure the host holds realised for an
	// activation to come, ahead of its dispatch.
	Prefetched string `json:"prefetched,omitempty"`
	// Blocked is the gate holding a Pending or Skipped host.
	Blocked *proto.DecisionReason `json:"blocked,omitempty"`
	// Activation is the latest activation the host reported.
	Activation *proto.Activation `json:"activation,omitempty"`
	// Analysis are the canary analysis runs of the host's wave.
	Analysis []proto.AnalysisRun `json:"analysis,omitempty"`
	// Release is, for a host of the fleet in no rollout, the release of
	// its channel that waits to open one.
	Release *proto.Release `json:"release,omitempty"`
	// Expected is what the rollout's latest forecast expects of the host.
	Expected *proto.HostExpectation `json:"expected,omitempty"`
}

func explainOf(h proto.HostView) explainView {
	e := explainView{Hostname: h.Hostname, Code: h.Explain.Code, Message: h.Explain.Message, Moves: h.Explain.Moves,
		Next: h.Explain.Next, Until: h.Explain.Until, Online: h.Online, Seen: h.Seen,
		Current: h.Observed.Current, Activation: h.Observed.Activation, Analysis: h.Analysis, Prefetched: h.Observed.Prefetched,
		Expected: h.Expected}
	if r := h.Host; r != nil {
		wave := r.Wave
		e.Rollout, e.Channel, e.RolloutState, e.State, e.Wave, e.Target = h.Rollout, h.Channel, h.RolloutState, r.State, &wave, r.Target
		e.OnTarget = h.Observed.Current != "" && h.Observed.Current == r.Target
		if r.Blocked.Gate != "" || r.Blocked.Code != "" {
			b := r.Blocked
			e.Blocked = &b
		}
	} else {
		e.Channel, e.Release = h.Channel, h.Release
	}
	return e
}

func runHostExplain(c *cli.Context, o *operator, args []string) error {
	h, _, err := o.api.Host(c.Context, args[0])
	if err != nil {
		return o.fail(c, err, notFoundHint(err, hostNotFoundHint))
	}
	e := explainOf(h)
	if c.Bool("json") {
		return writeJSON(c.App.Writer, e)
	}
	printExplain(c.App.Writer, o.st, e)
	return nil
}

func printExplain(w io.Writer, st style, e explainView) {
	verdict := "is not on its target"
	switch {
	case e.Rollout == "":
		verdict = "is in no rollout"
	case e.State == string(reconciler.HostFailed):
		verdict = "failed"
	case e.State == string(reconciler.HostReverted):
		verdict = "was rolled back"
	case e.OnTarget && e.State == string(reconciler.HostConverged):
		verdict = "is on its target"
	case e.OnTarget:
		verdict = fmt.Sprintf("runs its target (%s)", e.State)
	}
	fmt.Fprintf(w, "%s %s: %s\n", e.Hostname, verdict, reasonLine(e.Code, e.Message))
	f := &fields{}
	if e.Next != "" {
		f.add("next", e.Next)
	}
	if e.Until != nil {
		f.add("until", when(*e.Until))
	}
	if x := e.Expected; x != nil {
		f.add("expected", expectedText(*x))
	}
	if e.Rollout != "" {
		f.add("state", fmt.Sprintf("%s in %s (%s), wave %d", st.state(e.State), e.Rollout, st.state(e.RolloutState), *e.Wave))
	} else if e.Channel != "" {
		f.add("channel", e.Channel)
	}
	if e.Release != nil {
		f.add("release", releaseText(e.Release))
	}
	if b := e.Blocked; b != nil && b.Gate == e.Code {
		f.add("held by", gateText(*b))
	}
	if e.Target != "" {
		f.add("target", e.Target)
	}
	f.add("running", dash(e.Current))
	if e.Prefetched != "" {
		what := e.Prefetched
		switch {
		case e.Prefetched == e.Target && !e.OnTarget:
			what += " (its target: the dispatch only switches)"
		case e.Prefetched != e.Target:
			what += " (not its target)"
		}
		f.add("prefetched", what)
	}
	for _, a := range e.Analysis {
		f.add("analysis", analysisText(a, e.RolloutState))
	}
	if a := e.Activation; a != nil && a.Outcome != reconciler.OutcomeConfirmed {
		f.add("activation", activationText(a))
	}
	switch {
	case !e.Seen:
		f.add("seen", st.state("never seen")+": the host has not checked in")
	case !e.Online:
		f.add("seen", st.state("offline")+": a host offline when its wave starts is skipped, and catches up when it checks in")
	}
	indent(w, f)
}

// analysisText says where a canary analysis run stands: "error-ratio
// successful: 3 successful, 0 failed, 0 inconclusive; last 0.01 meets
// result < 0.05 at 2026-…".
func analysisText(a proto.AnalysisRun, rolloutState string) string {
	s := fmt.Sprintf("%s %s: %d successful, %d failed, %d inconclusive", a.Name, reconciler.ShownOutcome(a.Outcome, rolloutState), a.Successful, a.Failed, a.Inconclusive)
	if a.Forgiven > 0 {
		s += fmt.Sprintf(" (%d forgiven by a resume)", a.Forgiven)
	}
	if a.Last.Message != "" {
		s += "; last " + a.Last.Message + " at " + when(a.LastAt)
	}
	return s
}

// expectedText says what a forecast expects of a host: "dispatched at T
// (in D), converged at T (in D), after [gate] message".
func expectedText(x proto.HostExpectation) string {
	at := func(t *time.Time) string {
		d := t.Sub(x.MadeAt)
		if d <= 0 {
			return when(*t)
		}
		return when(*t) + " (in " + span(d) + ")"
	}
	var parts []string
	if x.Dispatch != nil {
		parts = append(parts, "dispatched at "+at(x.Dispatch))
	}
	if x.Converged != nil {
		parts = append(parts, "converged at "+at(x.Converged))
	}
	if len(parts) == 0 {
		parts = append(parts, "not within the forecast")
	}
	s := strings.Join(parts, ", ")
	if x.Gate != nil && x.Dispatch != nil {
		s += ", after " + reasonLine(x.Gate.Gate, x.Gate.Message)
	}
	if x.ByWave {
		s += " (its wave's times)"
	}
	return s + "; forecast of " + when(x.MadeAt)
}
