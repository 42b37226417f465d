package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

const rolloutNotFoundHint = "'nixfleet rollout list' shows the rollouts; 'nixfleet releases', every ref seen"

func rolloutCommand() *cli.Command {
	return &cli.Command{
		Name:  "rollout",
		Usage: "list, inspect, follow and steer rollouts",
		Flags: connFlags(),
		Subcommands: []*cli.Command{
			opCommand(&cli.Command{
				Name:        "list",
				Usage:       "every rollout, newest first",
				Description: "Reads GET /v1/rollouts page after page: summaries, with their hosts counted.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "channel", Usage: "only the rollouts of `CHANNEL`"},
					&cli.StringFlag{Name: "state", Usage: "only the rollouts in `STATE` (" + rolloutStateNames() + ")"},
					&cli.IntFlag{Name: "limit", Usage: "at most `N` rollouts, the newest (0: every one; --json then gives next)"},
					&cli.StringFlag{Name: "before", Usage: "only the rollouts after `CURSOR` (a --json list's next)"},
					pageSizeFlag,
				},
			}, nil, runRolloutList),
			opCommand(&cli.Command{
				Name:  "show",
				Usage: "a rollout: its state, waves and hosts",
				Description: "Shows the first page of the rollout's hosts (1,000 by name by default) and how\n" +
					"many follow; --hosts-after NAME shows the page after NAME.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "hosts-after", Usage: "show the hosts after `NAME`"},
					&cli.IntFlag{Name: "hosts-limit", Usage: "show at most `N` hosts (1-5000; 0: the server's 1,000)"},
				},
			}, []string{"ID"}, runRolloutShow),
			opCommand(&cli.Command{
				Name:  "plan",
				Usage: "when a rollout's waves and hosts are expected to move, and its end (the control plane's forecast)",
				Description: "Prints the control plane's latest forecast of the rollout (GET\n" +
					"/v1/rollouts/ID/forecast, rfcs/0014): when each wave starts and is done and\n" +
					"the gate that decides its start, when the rollout ends or what it waits for,\n" +
					"what the forecast assumed, and how its end moved since the first forecast.",
			}, []string{"ID"}, runRolloutPlan),
			opCommand(&cli.Command{
				Name:  "events",
				Usage: "a rollout's events, with --follow as they happen until the rollout ends",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "stream new events until the rollout is over (a converged or cancelled rollout that is its channel's latest can still be rolled back: it is followed until a newer one opens)"},
					&cli.BoolFlag{Name: "until-terminal", Usage: "with --follow, end at the rollout's first terminal state"},
					&cli.Int64Flag{Name: "after", Usage: "only events after the event `ID` (to resume)"},
				},
			}, []string{"ID"}, runRolloutEvents),
			intentCommand(reconciler.IntentPause, "halt a rollout: no new host is dispatched until it resumes"),
			intentCommand(reconciler.IntentResume, "resume a halted rollout"),
			intentCommand(reconciler.IntentCancel, "cancel a rollout: hosts stay where they are"),
			intentCommand(reconciler.IntentRollback, "roll a rollout back: hosts it moved return to their previous closure"),
			approveCommand(),
			breakFreezeCommand(),
		},
	}
}

// listed reads a list for a list command: a failure is reported, --json
// prints the server's document, an empty list prints empty. done says the
// command has nothing more to print (err is then its result).
func listed[T any](c *cli.Context, o *operator, empty string, fetch func() ([]T, json.RawMessage, error)) (items []T, done bool, err error) {
	items, raw, err := fetch()
	switch {
	case err != nil:
		return nil, true, o.fail(c, err, "")
	case c.Bool("json"):
		return nil, true, writeRaw(c.App.Writer, raw)
	case len(items) == 0:
		fmt.Fprintln(c.App.Writer, empty)
		return nil, true, nil
	}
	return items, false, nil
}

func rolloutStateNames() string {
	names := make([]string, len(reconciler.RolloutStates))
	for i, s := range reconciler.RolloutStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// maxRolloutPage is the most rollouts GET /v1/rollouts answers at once.
const maxRolloutPage = 1000

func runRolloutList(c *cli.Context, o *operator, _ []string) error {
	state := c.String("state")
	if state != "" && !slices.Contains(reconciler.RolloutStates, reconciler.RolloutState(state)) {
		return usage(c, "--state %q is not a rollout state (%s)", state, rolloutStateNames())
	}
	if err := checkPaging(c); err != nil {
		return err
	}
	q := proto.RolloutQuery{Channel: c.String("channel"), State: state}
	rollouts, raws, next, err := listPages(c.String("before"), c.Int("limit"), c.Int("page-size"), maxRolloutPage, "rollouts",
		func(cursor string, n int) ([]proto.Rollout, json.RawMessage, string, error) {
			q.Before, q.Limit = cursor, n
			p, raw, err := o.api.RolloutPage(c.Context, q)
			return p.Rollouts, raw, p.Next, err
		})
	switch {
	case err != nil:
		return o.fail(c, err, "")
	case c.Bool("json"):
		return writeJSON(c.App.Writer, struct {
			Rollouts []json.RawMessage `json:"rollouts"`
			Next     string            `json:"next,omitempty"`
		}{raws, next})
	case len(rollouts) == 0:
		fmt.Fprintln(c.App.Writer, "no rollouts")
		return nil
	}
	t := newTable("ROLLOUT", "STATE", "WAVE", "WAVES", "OPENED", "REASON")
	t.paint[1] = o.st.state
	for _, r := range rollouts {
		t.add(shortID(r.ID), shownState(r), fmt.Sprint(r.Wave), fmt.Sprint(len(r.Waves)), when(r.OpenedAt), reasonLine(r.Reason.Code, r.Reason.Message))
	}
	t.write(c.App.Writer)
	if next != "" {
		fmt.Fprintf(c.App.Writer, "more rollouts follow: add --before %s\n", next)
	}
	return nil
}

func runRolloutShow(c *cli.Context, o *operator, args []string) error {
	if n := c.Int("hosts-limit"); n < 0 || n > maxRolloutHostPage {
		return usage(c, "--hosts-limit must be between 1 and %d (0: the server's default)", maxRolloutHostPage)
	}
	after := c.String("hosts-after")
	r, raw, err := o.api.RolloutHostPage(c.Context, args[0], after, c.Int("hosts-limit"))
	if err != nil {
		return o.fail(c, err, notFoundHint(err, rolloutNotFoundHint))
	}
	if c.Bool("json") {
		return writeRaw(c.App.Writer, raw)
	}
	w, st := c.App.Writer, o.st
	f := &fields{}
	f.add("rollout", r.ID)
	f.add("channel", r.Channel)
	f.add("ref", r.Ref)
	f.add("state", st.state(shownState(r)))
	if off := reconciler.OffTarget(r.State, r.Counts); off != "" {
		f.add("", st.paint(ansiYellow, off))
	}
	f.add("reason", reasonLine(r.Reason.Code, r.Reason.Message))
	f.add("position", waveText(r))
	f.add("opened", when(r.OpenedAt))
	f.add("updated", when(r.UpdatedAt))
	f.add("progress", when(r.ProgressAt))
	maxFailures := "0"
	if r.HealthGate.MaxFailures != nil {
		maxFailures = fmt.Sprint(*r.HealthGate.MaxFailures)
	}
	f.add("policy", fmt.Sprintf("on health failure %s; at most %s failed host(s)", dash(r.OnHealthFailure), maxFailures))
	if r.FailuresForgiven > 0 {
		f.add("forgiven", fmt.Sprintf("%d failed host(s), by a resume", r.FailuresForgiven))
	}
	f.add("manifest", dash(r.ManifestHash))
	f.add("hosts", countsText(st, r.Counts))
	if len(r.Waiting) > 0 {
		f.add("waiting", waitingText(r.Waiting))
	}
	if r.Next != "" {
		f.add("next", r.Next)
	}
	if r.SoakUntil != nil && !terminal(r) {
		f.add("soak", fmt.Sprintf("wave %d converges at %s if its hosts stay healthy", r.Wave, when(*r.SoakUntil)))
	}
	for _, line := range budgetLines(r) {
		f.add("budget", line)
	}
	f.write(w)

	fmt.Fprintln(w)
	wt := newTable("WAVE", "SOAK", "PROGRESS")
	for _, wp := range waveProgressOf(r) {
		line := wp.text(st)
		if wp.index == r.Wave && !terminal(r) {
			line += "  <- current"
		}
		wt.add(waveName(r, wp.index), fmt.Sprintf("%dm", wp.soakMinutes), line)
	}
	wt.write(w)

	if len(r.Analyses) > 0 {
		fmt.Fprintln(w)
		at := newTable("WAVE", "ANALYSIS", "OUTCOME", "MEASUREMENTS", "LAST")
		for _, a := range r.Analyses {
			last := "-"
			if a.Last.Message != "" {
				last = a.Last.Message + " at " + when(a.LastAt)
			}
			at.add(waveName(r, a.Wave), a.Name, reconciler.ShownOutcome(a.Outcome, r.State), fmt.Sprintf("%d ok, %d failed, %d inconclusive", a.Successful, a.Failed, a.Inconclusive), last)
		}
		at.write(w)
	}

	if len(r.Hosts) > 0 {
		fmt.Fprintln(w)
		ht := newTable("HOST", "WAVE", "STATE", "SINCE", "REASON")
		ht.paint[2] = st.state
		for _, h := range r.Hosts {
			ht.add(h.Hostname, fmt.Sprint(h.Wave), h.State, when(h.Since), hostReason(h))
		}
		ht.write(w)
	}
	if r.HostsNext != "" {
		fmt.Fprintln(w, moreHostsLine(r, after))
	}
	return nil
}

// maxRolloutHostPage is the most hosts GET /v1/rollouts/{id} answers at
// once.
const maxRolloutHostPage = 5000

// moreHostsLine says that more hosts of a rollout follow the page shown
// (the hosts after after), how many when the page is the first, and the
// command that lists them: host list --rollout for a rollout that still
// drives its hosts (one that is not over); the next page of rollout show
// otherwise, since a rollout that is over may drive none of them.
func moreHostsLine(r proto.Rollout, after string) string {
	more := "more hosts follow"
	if after == "" {
		total := 0
		for _, n := range r.Counts {
			total += n
		}
		if n := total - len(r.Hosts); n > 0 {
			more = fmt.Sprintf("… and %d more host(s)", n)
		}
	}
	if !terminal(r) {
		return fmt.Sprintf("%s: nixfleet host list --rollout %s", more, r.ID)
	}
	return fmt.Sprintf("%s: nixfleet rollout show %s --hosts-after %s", more, r.ID, r.HostsNext)
}

// waveName is a wave's index, with the policy's name for it when it has
// one: "1 (canary)".
func waveName(r proto.Rollout, i int) string {
	if i >= 0 && i < len(r.Waves) && r.Waves[i].Name != "" {
		return fmt.Sprintf("%d (%s)", i, r.Waves[i].Name)
	}
	return fmt.Sprint(i)
}

// hostReason is why a host of a rollout is where it is now: its
// situation (rfcs/0012 §Hosts), else, from an older server, the gate the
// last tick recorded or the reason of its state.
func hostReason(h proto.RolloutHost) string {
	if s := h.Situation; s != nil {
		return reasonLine(s.Code, s.Message)
	}
	if h.Blocked.Gate != "" || h.Blocked.Code != "" {
		return "held by " + gateText(h.Blocked)
	}
	return reasonLine(h.Reason.Code, h.Reason.Message)
}

func notFoundHint(err error, hint string) string {
	if isNotFound(err) {
		return hint
	}
	return ""
}

func runRolloutEvents(c *cli.Context, o *operator, args []string) error {
	id := args[0]
	after := c.Int64("after")
	if after < 0 {
		return usage(c, "--after must be an event id (0 or more)")
	}
	asJSON := c.Bool("json")
	if c.Bool("until-terminal") && !c.Bool("follow") {
		return usage(c, "--until-terminal goes with --follow")
	}
	if c.Bool("follow") {
		return followEvents(c, o, id, after)
	}
	fetch := func(q proto.EventQuery) ([]proto.Event, json.RawMessage, error) {
		return o.api.RolloutEvents(c.Context, id, q)
	}
	all, err := allEvents(c, o, proto.EventQuery{AfterID: after}, fetch, rolloutNotFoundHint)
	if err != nil || asJSON {
		return err
	}
	l := layoutFor(eventHosts(all), o.st.width)
	printEvents(c.App.Writer, all, l.header(), func(ev proto.Event) string { return l.line(o.st, ev) })
	return nil
}

// allEvents reads every event q selects, a page of 1,000 after another,
// with fetch. With --json it prints them as the server sent them, as
// {"events": […]}. notFound is the hint of a not_found failure.
func allEvents(c *cli.Context, o *operator, q proto.EventQuery, fetch func(proto.EventQuery) ([]proto.Event, json.RawMessage, error), notFound string) ([]proto.Event, error) {
	// The events as the server sent them, for --json, and decoded.
	raws := []json.RawMessage{}
	var all []proto.Event
	const page = 1000
	q.Limit = page
	for {
		evs, raw, err := fetch(q)
		if err != nil {
			return nil, o.fail(c, err, notFoundHint(err, notFound))
		}
		var p struct {
			Events []json.RawMessage `json:"events"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, o.fail(c, err, "")
		}
		raws = append(raws, p.Events...)
		all = append(all, evs...)
		if len(evs) > 0 {
			q.AfterID = evs[len(evs)-1].ID
		}
		if len(evs) < page {
			break
		}
	}
	if c.Bool("json") {
		return all, writeJSON(c.App.Writer, map[string]any{"events": raws})
	}
	return all, nil
}

// printEvent is the callback of a followed stream: each event as the
// server sent it (a JSON line) or as a line for people; last keeps the id
// of the last one, to resume after.
func printEvent(w io.Writer, st style, l eventLayout, asJSON bool, last *int64) func(proto.Event, json.RawMessage) error {
	return func(ev proto.Event, m json.RawMessage) error {
		*last = ev.ID
		if asJSON {
			_, err := fmt.Fprintf(w, "%s\n", m)
			return err
		}
		_, err := fmt.Fprintln(w, l.line(st, ev))
		return err
	}
}

// printEvents prints events for people: header, then a line each.
func printEvents(w io.Writer, all []proto.Event, header string, line func(proto.Event) string) {
	if len(all) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	fmt.Fprintln(w, header)
	for _, ev := range all {
		fmt.Fprintln(w, line(ev))
	}
}

// followEvents streams a rollout's events until the rollout is terminal
// (the server then ends the stream), reconnecting after the last event
// seen when a stream ends early. An interrupt ends it without an error.
// With --json, each event is printed as the server sent it, one per line.
func followEvents(c *cli.Context, o *operator, id string, after int64) error {
	ctx, w, asJSON := c.Context, c.App.Writer, c.Bool("json")
	var l eventLayout
	if !asJSON {
		// The rollout's hosts size the host column before any event; a
		// ref that never opened has no rollout, and no host events.
		r, _, err := o.api.Rollout(ctx, id)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && !isNotFound(err):
			return o.fail(c, err, followHint(err, id, after))
		}
		l = layoutFor(rolloutHosts(r), o.st.width)
		fmt.Fprintln(w, l.header())
	}
	for {
		err := o.api.FollowRollout(ctx, id, after, c.Bool("until-terminal"), printEvent(w, o.st, l, asJSON, &after))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return o.fail(c, err, followHint(err, id, after))
		}
		// The server ends a stream when the rollout is terminal, or when
		// it could not read the journal: look which (its state is enough).
		r, _, err := o.api.RolloutHostPage(ctx, id, "", 1)
		if err != nil {
			if ctx.Err() != nil || isNotFound(err) {
				// Interrupted; or the id is a ref that never opened
				// (nixfleet releases), whose stream is over.
				return nil
			}
			return o.fail(c, err, followHint(err, id, after))
		}
		if terminal(r) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func followHint(err error, id string, after int64) string {
	if isNotFound(err) {
		return rolloutNotFoundHint
	}
	return fmt.Sprintf("resume with: nixfleet rollout events %s --follow --after %d", id, after)
}

// Event lines (rfcs/0009 §Human output 4): id, time, wave, host, what
// happened (the transition "from → to", else the event's kind) and the
// reason. The columns have fixed widths but the host's, so that followed
// events line up; the host column is as wide as the longest host of the
// batch or rollout, at most maxHostWidth (longer names are elided).
// Closures in reasons are shown by their name, without the store path and
// hash. On a terminal a reason that would pass its width (style.width) is
// wrapped at spaces onto lines of its own, indented to its column, and
// never inside a word; piped, an event is one line. --json keeps every
// value whole.
const (
	maxHostWidth = 24
	minHostWidth = len("HOST")
	// minReasonCols is the narrowest a reason is wrapped under its
	// column; on a narrower terminal it starts on the next line, under
	// the time (reasonIndent).
	minReasonCols = 40
	reasonIndent  = 7
	// eventWidth fits the longest transition, "Activating → RollingBack".
	eventWidth = 24
)

// eventLayout is the column layout of a run of event lines.
type eventLayout struct {
	widths []int // of every column but the last (the reason)
	// about adds, after the time, what each event is about (its rollout,
	// else its channel): the whole journal mixes them.
	about bool
	// width is the line's (style.width): 0 wraps nothing.
	width int
	// clock shows the time of day only ("15:04:05Z"), on a terminal too
	// narrow for the whole time beside the other columns; --json and
	// wider terminals have the whole time.
	clock bool
}

// timeWidths are the time column's widths: whole, and the time of day.
const (
	wholeTimeWidth = 20
	clockWidth     = 9
)

// fitted is l with the time of day only when the columns would not fit
// its width otherwise (the reason may still start on the next line).
func (l eventLayout) fitted() eventLayout {
	l.widths = slices.Clone(l.widths)
	l.widths[1], l.clock = wholeTimeWidth, false
	used := 0
	for _, w := range l.widths {
		used += w + 2
	}
	if l.width > 0 && used > l.width {
		l.widths[1], l.clock = clockWidth, true
	}
	return l
}

// aboutWidth is the width of the about column.
const aboutWidth = 16

// aboutText is what an event is about, short: its rollout (shortID),
// else its channel. --json has the whole id.
func aboutText(ev proto.Event) string {
	if strings.Contains(ev.RolloutID, "@") {
		return shortID(ev.RolloutID)
	}
	return dash(cmpOr(ev.RolloutID, ev.Channel))
}

// withAbout is the layout with the about column.
func (l eventLayout) withAbout() eventLayout {
	return eventLayout{widths: slices.Insert(slices.Clone(l.widths), 2, aboutWidth), about: true, width: l.width}.fitted()
}

// hostCol is the host column's index.
func (l eventLayout) hostCol() int {
	if l.about {
		return 4
	}
	return 3
}

// eventColumnNames are the header's words.
var eventColumnNames = []string{"ID", "TIME", "WAVE", "HOST", "EVENT", "REASON"}

// layoutFor sizes the host column for these hosts, in lines of width
// columns (0: not wrapped).
func layoutFor(hosts []string, width int) eventLayout {
	host := minHostWidth
	for _, h := range hosts {
		host = max(host, utf8.RuneCountInString(h))
	}
	return eventLayout{widths: []int{5, wholeTimeWidth, 4, min(host, maxHostWidth), eventWidth}, width: width}.fitted()
}

// eventHosts are the hosts the events name.
func eventHosts(evs []proto.Event) []string {
	hosts := make([]string, 0, len(evs))
	for _, ev := range evs {
		hosts = append(hosts, ev.Host)
	}
	return hosts
}

// rolloutHosts are a rollout's hosts, to size the lines of its events
// before they arrive.
func rolloutHosts(r proto.Rollout) []string {
	hosts := make([]string, 0, len(r.Hosts))
	for _, h := range r.Hosts {
		hosts = append(hosts, h.Hostname)
	}
	return hosts
}

func (l eventLayout) header() string {
	names := eventColumnNames
	if l.about {
		names = slices.Insert(slices.Clone(names), 2, "ABOUT")
	}
	return l.join(names, nil)
}

// line is one event for people.
func (l eventLayout) line(st style, ev proto.Event) string {
	wave := "-"
	if ev.Wave >= 0 {
		wave = fmt.Sprint(ev.Wave)
	}
	what, painted := ev.Kind, ev.Kind
	if ev.From != "" || ev.To != "" {
		from, to := cmpOr(ev.From, "·"), cmpOr(ev.To, "·")
		what = from + " → " + to
		painted = st.state(from) + " → " + st.state(to)
	}
	reason := reasonLine(ev.Reason.Code, elideClosures(ev.Reason.Message))
	if ev.Reason.Gate != "" && ev.Reason.Gate != ev.Reason.Code {
		reason += " (gate " + ev.Reason.Gate + ")"
	}
	if ev.Reason.Actor != "" && !strings.Contains(ev.Reason.Message, ev.Reason.Actor) {
		reason += " (by " + ev.Reason.Actor + ")"
	}

	reason += budgetsText(ev.Budgets)
	host := elide(dash(ev.Host), l.widths[l.hostCol()])
	at := when(ev.At)
	if l.clock && !ev.At.IsZero() {
		at = ev.At.UTC().Format("15:04:05Z")
	}
	cells := []string{fmt.Sprint(ev.ID), at, wave, host, what, reason}
	if l.about {
		cells = slices.Insert(cells, 2, elide(aboutText(ev), l.widths[2]))
	}
	return l.join(cells, map[int]string{len(cells) - 2: painted})
}

// budgetLines are a rollout's disruption budgets: how many of its hosts
// each allows in flight, of how many, and how many are, counted among its
// hosts when the view holds them all (a paged view gives the limit only).
// In flight counts this rollout's hosts; the tick counts every rollout's.
func budgetLines(r proto.Rollout) []string {
	inFlight := map[string]bool{}
	for _, h := range r.Hosts {
		if reconciler.HostState(h.State).InFlight() {
			inFlight[h.Hostname] = true
		}
	}
	var out []string
	for i, u := range reconciler.Occupancy(r.Budgets, func(h string) bool { return inFlight[h] }) {
		line := fmt.Sprintf("%s: at most %d of its %d host(s) in flight", u.Name, u.Limit, len(r.Budgets[i].Hosts))
		if r.HostsNext == "" {
			line += fmt.Sprintf("; %d of this rollout's now", u.InFlight)
		}
		out = append(out, line)
	}
	return out
}

// budgetsText is the occupancy of the budgets an event notes, as
// " [web 3/3, all 5/10]"; empty when it notes none.
func budgetsText(uses []proto.BudgetUse) string {
	if len(uses) == 0 {
		return ""
	}
	parts := make([]string, len(uses))
	for i, u := range uses {
		parts[i] = u.String()
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

// join pads each cell but the last to its column's width, and wraps the
// last at spaces onto lines indented to its column, so that every line
// fits the layout's width (but for a word longer than the column); painted
// replaces a cell's text by a coloured rendering of the same width.
func (l eventLayout) join(cells []string, painted map[int]string) string {
	var b strings.Builder
	used := 0
	for i, c := range cells[:len(cells)-1] {
		text := c
		if p, ok := painted[i]; ok {
			text = p
		}
		pad := max(l.widths[i]-utf8.RuneCountInString(c), 0) + 2
		b.WriteString(text + strings.Repeat(" ", pad))
		used += utf8.RuneCountInString(c) + pad
	}
	last := cells[len(cells)-1]
	if l.width == 0 {
		b.WriteString(strings.Join(strings.Fields(last), " "))
		return strings.TrimRight(b.String(), " ")
	}
	room := l.width - used
	if room < minReasonCols {
		first := strings.TrimRight(b.String(), " ")
		b.Reset()
		used = reasonIndent
		b.WriteString(first + "\n" + strings.Repeat(" ", used))
		room = max(l.width-used, 1) // a very narrow terminal: a word a line
	}
	indent := "\n" + strings.Repeat(" ", used)
	b.WriteString(strings.Join(wrap(last, room), indent))
	return strings.TrimRight(b.String(), " ")
}

// wrap breaks s into lines of at most n runes, at spaces; a word longer
// than n has a line of its own, whole: a code or a name cut in two reads
// as two words and greps as none.
func wrap(s string, n int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) <= n:
			line += " " + w
		default:
			lines, line = append(lines, line), w
		}
	}
	return append(lines, line)
}

// elide cuts s to n runes, its last one "…", when it is longer.
func elide(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// storePath is a Nix store path, or a bare "<hash>-<name>" as manifests
// name closures: the 32-character hash and the store directory go.
var storePath = regexp.MustCompile(`(?:/nix/store/)?\b[0-9a-z]{32}-([0-9A-Za-z+._?=-]+)`)

// elideClosures shows the closures a message names by their names.
func elideClosures(msg string) string {
	return storePath.ReplaceAllString(msg, "$1")
}

// intentCommand is "rollout pause|resume|cancel|rollback ID": file the
// intent, and report what the tick that consumed it decided.
func intentCommand(kind, use string) *cli.Command {
	return opCommand(&cli.Command{
		Name:  kind,
		Usage: use,
		Description: "Files an operator intent; the control plane's next tick decides it (within\n" +
			"about 5 s). Exit 0: accepted; a repeat whose outcome already holds (pause of a\n" +
			"Halted rollout, …: already_in_state, nothing moves); or still queued when no\n" +
			"tick decided in time.\n" +
			"Exit 1: refused, with the server's code (illegal_transition, forbidden, …).",
		Flags: []cli.Flag{&cli.StringFlag{Name: "comment", Usage: "`TEXT` kept with the intent and shown in its events (at most 500 bytes, one line)"}},
	}, []string{"ID"}, func(c *cli.Context, o *operator, args []string) error {
		return runIntent(c, o, kind, args[0], proto.IntentRequest{Comment: c.String("comment")})
	})
}

// approverDescription says what the approver's intents answer.
const approverDescription = "Needs an operator key of role approver. The control plane's next tick decides\n" +
	"the intent (within about 5 s). Exit 0: accepted, or still queued when no tick\n" +
	"decided in time. Exit 1: refused, with the server's code (forbidden,\n" +
	"not_approvable, not_frozen, …). Exit 2: a required flag is missing."

// requiredComment is the --comment flag of the approver's intents.
func requiredComment() cli.Flag {
	return &cli.StringFlag{Name: "comment", Usage: "`TEXT` saying why, kept with the intent and shown in its events (required; at most 500 bytes, one line)"}
}

// approveCommand is "rollout approve ID --wave N --comment TEXT": an
// approver's approval of a wave that waits for approvals (rfcs/0003).
func approveCommand() *cli.Command {
	return opCommand(&cli.Command{
		Name:        reconciler.IntentApprove,
		Usage:       "approve a wave of a rollout that its approval gate holds",
		Description: approverDescription,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "wave", Usage: "the wave `N` to approve, by index as the journal counts them (0 is the first; required)"},
			requiredComment(),
		},
	}, []string{"ID"}, func(c *cli.Context, o *operator, args []string) error {
		if !c.IsSet("wave") {
			return usage(c, "--wave N is required: the wave to approve (0 is the first)")
		}
		wave := c.Int("wave")
		if wave < 0 {
			return usage(c, "--wave %d is not a wave: waves count from 0", wave)
		}
		if e := checkRequiredComment(c); e != nil {
			return e
		}
		return runIntent(c, o, reconciler.IntentApprove, args[0], proto.IntentRequest{Wave: &wave, Comment: c.String("comment")})
	})
}

// breakFreezeCommand is "rollout break-freeze ID --comment TEXT": an
// approver lets a rollout, or a release a freeze keeps from opening, through
// its channel's freezes.
func breakFreezeCommand() *cli.Command {
	return opCommand(&cli.Command{
		Name:  reconciler.IntentBreakFreeze,
		Usage: "let a rollout (or a release that a freeze keeps from opening) through its channel's freezes",
		Description: approverDescription + "\n" +
			"ID may name a release that has not opened ('nixfleet releases': deferred by freeze).",
		Flags: []cli.Flag{requiredComment()},
	}, []string{"ID"}, func(c *cli.Context, o *operator, args []string) error {
		if e := checkRequiredComment(c); e != nil {
			return e
		}
		return runIntent(c, o, reconciler.IntentBreakFreeze, args[0], proto.IntentRequest{Comment: c.String("comment")})
	})
}

// checkRequiredComment refuses a missing or blank --comment.
func checkRequiredComment(c *cli.Context) error {
	if strings.TrimSpace(c.String("comment")) == "" {
		return usage(c, "--comment TEXT is required: say why; it goes into the journal with your name")
	}
	return nil
}

// runIntent files an intent and prints the verdict. A refusal by the tick
// (409) exits 1 with its code, after --json prints the answer.
func runIntent(c *cli.Context, o *operator, kind, id string, req proto.IntentRequest) error {
	iv, raw, err := o.api.FileIntent(c.Context, id, kind, req)
	var ae *apiclient.Error
	if err != nil {
		// A refusal (409) carries the intent and the tick's verdict.
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict || raw == nil || iv.Result == nil {
			hint := notFoundHint(err, rolloutNotFoundHint)
			if errors.As(err, &ae) && ae.Code == codes.Forbidden && (kind == reconciler.IntentApprove || kind == reconciler.IntentBreakFreeze) {
				hint = "use the key of an operator whose role is approver (--key, NIXFLEET_KEY, config key)"
			}
			return o.fail(c, err, hint)
		}
		if c.Bool("json") {
			if werr := writeRaw(c.App.Writer, raw); werr != nil {
				return werr
			}
		}
		return &cliError{exit: exitFailed, cmd: cmdName(c), code: ae.Code, err: remoteError{ae},
			hint: cmpOr(apiHint(ae.Code, shortID(id)), fmt.Sprintf("'nixfleet rollout show %s' shows its state", shortID(id)))}
	}
	if c.Bool("json") {
		return writeRaw(c.App.Writer, raw)
	}
	printIntent(c.App.Writer, o.st, kind, id, iv)
	return nil
}

// printIntent prints an intent's verdict: "pause ID: accepted [code]
// message (intent X)", "approve ID wave N: …", the message alone for a
// repeat, or that it is queued.
func printIntent(w io.Writer, st style, kind, id string, iv proto.IntentResponse) {
	what := kind + " " + id
	if iv.Intent.Wave != nil {
		what += fmt.Sprintf(" wave %d", *iv.Intent.Wave)
	}
	if iv.Result == nil {
		fmt.Fprintf(w, "%s: %s as intent %s; no tick decided it yet\n", what, st.state("queued"), iv.Intent.ID)
		fmt.Fprintf(w, "watch it with: nixfleet rollout events %s --follow\n", id)
		return
	}
	if iv.Result.Reason.Code == codes.AlreadyInState {
		// A repeat: nothing moved (rfcs/0007 §Intents).
		fmt.Fprintln(w, iv.Result.Reason.Message)
		return
	}
	fmt.Fprintf(w, "%s: %s %s (intent %s)\n", what, st.state("accepted"),
		reasonLine(iv.Result.Reason.Code, iv.Result.Reason.Message), iv.Intent.ID)
}
