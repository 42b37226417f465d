package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// plannedRef is the ref of a planned release whose fleet has no
// meta.ciCommit yet (CI stamps it when it signs).
const plannedRef = "planned"

// planNames is how many hosts that change the text names per rollout
// without --hosts.
const planNames = 10

func releasePlanCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "forecast what pushing a fleet.resolved would do: hosts that change, waves, gates, duration",
		Description: "Projects the (unsigned) fleet.resolved into its rollouts, makes it each of its\n" +
			"channels' latest release, and runs the reconciler forward (reconciler.Forecast,\n" +
			"rfcs/0014): per rollout, the hosts that change, when each wave starts and is\n" +
			"done and the gate that decides its start (a window, a freeze, an approval,\n" +
			"a channel edge, a budget), and when the rollout ends or what it waits for.\n\n" +
			"Without --state every host of the fleet is taken as connected at --at and\n" +
			"not on its target, with no rollout live. --state is a reconciler Input (the\n" +
			"format 'nixfleet reconcile --input' reads): the fleet as it is now.\n\n" +
			"An approval is never assumed unless --approve-after D is given: then the\n" +
			"approval a wave needs is taken as given D after the wave becomes current\n" +
			"(its previous wave done; a first wave, D after --at, or when its rollout\n" +
			"opens if that is later). Nothing is read from or sent to a control plane.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "fleet", Usage: "the unsigned fleet.resolved.json `FILE` to plan (- for stdin)"},
			&cli.StringFlag{Name: "state", Usage: "a reconciler Input `FILE`: the fleet now (default: every host connected, none on its target)"},
			&cli.StringFlag{Name: "at", Usage: "the push happens at this RFC 3339 `TIME` (default: the state's now, else the clock)"},
			&cli.DurationFlag{Name: "activation", Value: reconciler.DefaultForecastActivation, Usage: "a host takes `D` to switch"},
			&cli.DurationFlag{Name: "approve-after", DefaultText: "none assumed", Usage: "assume each approval `D` after its wave becomes current"},
			&cli.DurationFlag{Name: "horizon", Value: reconciler.DefaultForecastHorizon, Usage: "forecast at most `D` ahead"},
			&cli.BoolFlag{Name: "hosts", Usage: "list every host that changes, with its dispatch and convergence"},
			jsonFlag,
		},
		Action: releasePlan,
	}
}

// planOptions are what a plan assumes besides its fleet and state.
type planOptions struct {
	at           time.Time
	model        reconciler.Model
	approveAfter *time.Duration
	hosts        bool
}

func releasePlan(c *cli.Context) error {
	if c.NArg() > 0 {
		return usage(c, "unexpected argument %q", c.Args().First())
	}
	if err := requireFlags(c, "fleet"); err != nil {
		return err
	}
	opts := planOptions{hosts: c.Bool("hosts")}
	for _, name := range []string{"activation", "approve-after", "horizon"} {
		if d := c.Duration(name); d < 0 {
			return usage(c, "--%s must not be negative, not %s", name, d)
		}
	}
	opts.model.Activation = c.Duration("activation")
	opts.model.Horizon = c.Duration("horizon")
	if c.IsSet("approve-after") {
		d := c.Duration("approve-after")
		opts.approveAfter = &d
	}
	if s := c.String("at"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return usage(c, "--at %q is not an RFC 3339 time (like 2026-11-21T10:00:00Z)", s)
		}
		opts.at = t
	}
	if c.String("fleet") == "-" && c.String("state") == "-" {
		return usage(c, "--fleet and --state cannot both be stdin")
	}
	data, err := readInput(c, c.String("fleet"))
	if err != nil {
		return ioError(c, err)
	}
	var state *reconciler.Input
	if s := c.String("state"); s != "" {
		raw, err := readInput(c, s)
		if err != nil {
			return ioError(c, err)
		}
		in, err := decodeReconcileInput(raw)
		if err != nil {
			return failed(c, fmt.Errorf("--state %s: %w", s, err), "--state is a reconciler Input, as 'nixfleet reconcile --input' reads (rfcs/0003-reconciler.md)")
		}
		state = &in
	}
	if opts.at.IsZero() {
		if state != nil {
			opts.at = state.Now
		} else {
			opts.at = time.Now().UTC().Truncate(time.Second)
		}
	}
	fleet, err := proto.DecodeFleetResolved(data)
	if err != nil {
		return failed(c, fmt.Errorf("%w: %w", trust.ErrMalformed, err), "")
	}
	warnings, err := manifest.ValidateFleet(fleet)
	if err != nil {
		return failed(c, err, wavesHint(data))
	}
	for _, w := range warnings {
		fmt.Fprintf(c.App.ErrWriter, "warning: %s\n", w)
	}
	p, err := makePlan(fleet, data, state, opts)
	if err != nil {
		return failed(c, err, "")
	}
	p.Warnings = append([]string{}, warnings...)
	if c.Bool("json") {
		return writeJSON(c.App.Writer, p)
	}
	p.write(c.App.Writer, opts)
	return nil
}

// plan is what `release plan --json` prints (rfcs/0009 §Planning a
// release).
type plan struct {
	At time.Time `json:"at"`
	// Ref is the release's ref: its meta.ciCommit, or plannedRef.
	Ref      string  `json:"ref"`
	CICommit *string `json:"ciCommit"`
	// State is "assumed" (no --state) or "given".
	State string    `json:"state"`
	Model planModel `json:"model"`
	// End is when the last planned rollout ends, when they all do.
	End             time.Time `json:"end,omitzero"`
	DurationSeconds *int64    `json:"durationSeconds,omitempty"`
	// Cut and Until are the forecast's.
	Cut      string         `json:"cut"`
	Until    time.Time      `json:"until"`
	Channels []planChannel  `json:"channels"`
	Others   []planRollout  `json:"others"`
	Warnings []string       `json:"warnings"`
	ticks    int            // the forecast's, for the text of a cut by ticks
	byID     map[string]int // Channels by rollout id
}

type planModel struct {
	ActivationSeconds   int64  `json:"activationSeconds"`
	CheckinSeconds      int64  `json:"checkinSeconds"`
	ApproveAfterSeconds *int64 `json:"approveAfterSeconds"`
	HorizonSeconds      int64  `json:"horizonSeconds"`
}

// planChannel is one planned rollout: the release on one channel.
type planChannel struct {
	Channel   string `json:"channel"`
	RolloutID string `json:"rolloutId"`
	// Opens: the rollout opens within the forecast.
	Opens       bool `json:"opens"`
	HostCount   int  `json:"hostCount"`
	ChangeCount int  `json:"changeCount"`
	// SilentCount: hosts not heard at the push; the forecast takes them
	// as silent for good.
	SilentCount int `json:"silentCount"`
	// Held: for a rollout that does not open, what its ref waits for
	// (the channel's active rollout, a channel edge, a freeze).
	Held *planReason `json:"held,omitempty"`
	// State is the rollout's at the end of the forecast ("" when it does
	// not open).
	State           reconciler.RolloutState `json:"state,omitempty"`
	End             time.Time               `json:"end,omitzero"`
	DurationSeconds *int64                  `json:"durationSeconds,omitempty"`
	Waiting         *planReason             `json:"waiting,omitempty"`
	// Approvals are the approvals the plan assumed (--approve-after).
	Approvals []planApproval `json:"approvals"`
	Waves     []planWave     `json:"waves"`
	// States counts its hosts by their state at the end of the forecast.
	States map[reconciler.HostState]int `json:"states,omitempty"`
	// Hosts are the hosts that change, with --hosts only.
	Hosts []planHost `json:"hosts,omitempty"`
	// changed and silent are the names of the hosts that change and of
	// those not heard (text).
	changed, silent []string
	lastRolled      bool
}

type planWave struct {
	Index       int         `json:"index"`
	Name        string      `json:"name,omitempty"`
	HostCount   int         `json:"hostCount"`
	ChangeCount int         `json:"changeCount"`
	Start       time.Time   `json:"start,omitzero"`
	Done        time.Time   `json:"done,omitzero"`
	Gate        *planReason `json:"gate,omitempty"`
}

type planHost struct {
	Host      string               `json:"host"`
	Wave      int                  `json:"wave"`
	Dispatch  time.Time            `json:"dispatch,omitzero"`
	Converged time.Time            `json:"converged,omitzero"`
	State     reconciler.HostState `json:"state"`
	Gate      *planReason          `json:"gate,omitempty"`
}

type planApproval struct {
	Wave int       `json:"wave"`
	At   time.Time `json:"at"`
}

type planReason struct {
	Code    string `json:"code"`
	Gate    string `json:"gate,omitempty"`
	Message string `json:"message"`
}

// planRollout is a rollout of the state that the forecast follows besides
// the planned ones.
type planRollout struct {
	RolloutID string                  `json:"rolloutId"`
	Channel   string                  `json:"channel"`
	State     reconciler.RolloutState `json:"state"`
	End       time.Time               `json:"end,omitzero"`
	Waiting   *planReason             `json:"waiting,omitempty"`
	Approvals []planApproval          `json:"approvals,omitempty"`
}

func reasonOf(r reconciler.Reason) *planReason {
	if r.Code == "" && r.Message == "" {
		return nil
	}
	return &planReason{Code: r.Code, Gate: r.Gate, Message: r.Message}
}

// makePlan builds the forecast's input from the fleet and the state, runs
// it (again for each approval --approve-after assumes), and says what it
// expects of each planned rollout.
func makePlan(fleet *proto.FleetResolved, raw []byte, state *reconciler.Input, opts planOptions) (*plan, error) {
	// The manifests' fleetResolvedHash: the signed fleet's differs (CI
	// stamps meta first), and nothing the forecast says depends on it.
	sum := sha256.Sum256(raw)
	p := &plan{At: opts.at.UTC(), Ref: plannedRef, Channels: []planChannel{}, Others: []planRollout{}, byID: map[string]int{}}
	if c := fleet.Meta.CICommit; c != nil && *c != "" {
		ref := *c
		p.Ref, p.CICommit = ref, &ref
	} else {
		ref := plannedRef
		fleet.Meta.CICommit = &ref
	}
	manifests, err := manifest.Project(fleet, hex.EncodeToString(sum[:]))
	if err != nil {
		return nil, err
	}
	var in reconciler.Input
	if state != nil {
		in = *state
		in.Channels = slices.Clone(state.Channels)
		p.State = "given"
	} else {
		in = reconciler.Input{Hosts: map[string]reconciler.ObservedHost{}}
		for name, h := range fleet.Hosts {
			if h.ClosureHash != nil {
				in.Hosts[name] = reconciler.ObservedHost{LastSeen: opts.at}
			}
		}
		p.State = "assumed"
	}
	in.Now = opts.at
	for _, m := range manifests {
		body, err := manifest.Marshal(m)
		if err != nil {
			return nil, err
		}
		hash := sha256.Sum256(body)
		ch := reconciler.Channel{Name: m.Channel, Ref: p.Ref, Fleet: fleet, Manifest: m, ManifestHash: hex.EncodeToString(hash[:])}
		if i := slices.IndexFunc(in.Channels, func(x reconciler.Channel) bool { return x.Name == m.Channel }); i >= 0 {
			ch.LastRolledRef = in.Channels[i].LastRolledRef
			in.Channels[i] = ch
		} else {
			in.Channels = append(in.Channels, ch)
		}
		pc := planChannel{Channel: m.Channel, RolloutID: m.RolloutID(), HostCount: len(m.HostSet), Approvals: []planApproval{},
			Waves: []planWave{}, lastRolled: ch.LastRolledRef == p.Ref}
		for _, h := range m.HostSet {
			o := in.Hosts[h.Hostname]
			if o.Current != h.TargetClosure {
				pc.changed = append(pc.changed, h.Hostname)
			}
			if in.Tunables.Late(o.LastSeen, in.Now) {
				pc.silent = append(pc.silent, h.Hostname)
			}
		}
		pc.ChangeCount, pc.SilentCount = len(pc.changed), len(pc.silent)
		p.byID[pc.RolloutID] = len(p.Channels)
		p.Channels = append(p.Channels, pc)
	}
	res, approvals := forecastApproving(in, opts.model, opts.approveAfter)
	p.ticks = res.Ticks
	p.Cut, p.Until = res.Cut, res.Until.UTC()
	p.Model = planModel{ActivationSeconds: seconds(cmpDur(opts.model.Activation, reconciler.DefaultForecastActivation)),
		CheckinSeconds: seconds(cmpDur(opts.model.Checkin, in.Tunables.CheckinPeriod())),
		HorizonSeconds: seconds(cmpDur(opts.model.Horizon, reconciler.DefaultForecastHorizon))}
	if opts.approveAfter != nil {
		s := seconds(*opts.approveAfter)
		p.Model.ApproveAfterSeconds = &s
	}
	assumed := map[string][]planApproval{}
	for _, ap := range approvals {
		assumed[ap.RolloutID] = append(assumed[ap.RolloutID], planApproval{Wave: ap.Wave, At: ap.At.UTC()})
	}
	for _, r := range res.Rollouts {
		i, ok := p.byID[r.ID]
		if !ok {
			p.Others = append(p.Others, planRollout{RolloutID: r.ID, Channel: r.Channel, State: r.State, End: r.End.UTC(),
				Waiting: reasonOf(r.Waiting), Approvals: assumed[r.ID]})
			continue
		}
		p.Channels[i].fill(r, opts)
		p.Channels[i].Approvals = append(p.Channels[i].Approvals, assumed[r.ID]...)
	}
	allEnd := len(p.Channels) > 0
	held := map[string]reconciler.Reason{}
	for _, u := range res.Unopened {
		held[u.RolloutID] = u.Waiting
	}
	for i := range p.Channels {
		pc := &p.Channels[i]
		if !pc.Opens && !pc.lastRolled {
			pc.Held = reasonOf(held[pc.RolloutID])
		}
		if !pc.Opens || pc.End.IsZero() {
			allEnd = false
			continue
		}
		if pc.End.After(p.End) {
			p.End = pc.End
		}
	}
	if allEnd {
		d := seconds(p.End.Sub(p.At))
		p.DurationSeconds = &d
	} else {
		p.End = time.Time{}
	}
	return p, nil
}

// fill records what the forecast expects of a planned rollout.
func (pc *planChannel) fill(r reconciler.RolloutForecast, opts planOptions) {
	pc.Opens, pc.State = true, r.State
	if !r.End.IsZero() {
		pc.End = r.End.UTC()
		d := seconds(r.End.Sub(opts.at))
		pc.DurationSeconds = &d
	} else {
		pc.Waiting = reasonOf(r.Waiting)
	}
	changes := make(map[string]bool, len(pc.changed))
	for _, h := range pc.changed {
		changes[h] = true
	}
	for _, w := range r.Waves {
		pc.Waves = append(pc.Waves, planWave{Index: w.Index, Name: w.Name, Start: w.Start.UTC(), Done: w.Done.UTC(), Gate: reasonOf(w.Gate)})
	}
	pc.States = map[reconciler.HostState]int{}
	for _, h := range r.Hosts {
		pc.States[h.State]++
		if h.Wave >= 0 && h.Wave < len(pc.Waves) {
			pc.Waves[h.Wave].HostCount++
			if changes[h.Host] {
				pc.Waves[h.Wave].ChangeCount++
			}
		}
		if opts.hosts && changes[h.Host] {
			pc.Hosts = append(pc.Hosts, planHost{Host: h.Host, Wave: h.Wave, Dispatch: h.Dispatch.UTC(), Converged: h.Converged.UTC(),
				State: h.State, Gate: reasonOf(h.Gate)})
		}
	}
}

// forecastApproving runs the forecast. With an approval delay it assumes,
// for each rollout that ends waiting for an approval, the approval of its
// current wave that delay after the wave became current, and runs it
// again, until no rollout waits for an approval not yet assumed. It
// returns the last forecast and the approvals it assumed.
//
// A wave becomes current when the wave before it is done; a rollout's
// first wave (or the wave current in the state) at --at, or at its
// WaveStartedAt when the state has the rollout live (the forecast files
// an approval of a rollout not open yet when it opens).
func forecastApproving(in reconciler.Input, m reconciler.Model, after *time.Duration) (reconciler.ForecastResult, []reconciler.AssumedApproval) {
	res := reconciler.Forecast(in, m)
	if after == nil {
		return res, nil
	}
	live := map[string]reconciler.Rollout{}
	for _, r := range in.Rollouts {
		live[r.ID] = r
	}
	assumed := map[string]bool{}
	// Each round assumes an approval of a wave not assumed before, so the
	// rounds are at most the waves.
	for {
		added := false
		for _, r := range res.Rollouts {
			if !r.End.IsZero() || r.Waiting.Gate != codes.Approval {
				continue
			}
			first, since := 0, in.Now
			if l, ok := live[r.ID]; ok {
				first, since = l.Wave, l.WaveStartedAt
			}
			w := first
			for w < len(r.Waves) && !r.Waves[w].Done.IsZero() {
				w++
			}
			if w >= len(r.Waves) {
				continue
			}
			key := r.ID + "#" + strconv.Itoa(w)
			if assumed[key] {
				continue
			}
			if w > first {
				since = r.Waves[w-1].Done
			}
			assumed[key], added = true, true
			m.Approvals = append(m.Approvals, reconciler.AssumedApproval{RolloutID: r.ID, Wave: w, At: since.Add(*after)})
		}
		if !added {
			break
		}
		res = reconciler.Forecast(in, m)
	}
	return res, m.Approvals
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

func cmpDur(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// ---- text ----

func (p *plan) write(w io.Writer, opts planOptions) {
	if p.CICommit != nil {
		fmt.Fprintf(w, "release plan for %s\n", p.Ref)
	} else {
		fmt.Fprintf(w, "release plan for ref %q: the fleet has no meta.ciCommit yet (CI stamps it when it signs)\n", p.Ref)
	}
	fmt.Fprintf(w, "pushed at %s; a host takes %s to switch", when(p.At), span(time.Duration(p.Model.ActivationSeconds)*time.Second))
	if p.Model.ApproveAfterSeconds != nil {
		fmt.Fprintf(w, "; each approval is given %s after its wave becomes current\n", span(time.Duration(*p.Model.ApproveAfterSeconds)*time.Second))
	} else {
		fmt.Fprintln(w, "; no approval assumed (--approve-after D assumes them)")
	}
	if p.State == "assumed" {
		fmt.Fprintln(w, "state: every host of the fleet connected, none on its target, no rollout live (--state gives the fleet as it is)")
	} else {
		fmt.Fprintln(w, "state: as --state gives it")
	}
	switch {
	case p.DurationSeconds != nil:
		fmt.Fprintf(w, "every rollout ends by %s (%s)\n", when(p.End), p.rel(p.End))
	case p.Cut == "horizon":
		fmt.Fprintf(w, "not every rollout ends within the forecast's horizon, %s (--horizon)\n", span(time.Duration(p.Model.HorizonSeconds)*time.Second))
	case p.Cut == "ticks":
		fmt.Fprintf(w, "not every rollout ends within the forecast's %d ticks\n", p.ticks)
	default:
		fmt.Fprintln(w, "not every rollout ends: they wait for what no time brings (below)")
	}
	for _, pc := range p.Channels {
		fmt.Fprintln(w)
		pc.write(w, p, opts)
	}
	if len(p.Others) > 0 {
		fmt.Fprintln(w, "\nrollouts of the state:")
		for _, o := range p.Others {
			switch {
			case !o.End.IsZero():
				fmt.Fprintf(w, "  %s  %s at %s (%s)\n", proto.ShortRolloutID(o.RolloutID), o.State, when(o.End), p.rel(o.End))
			case o.Waiting != nil:
				fmt.Fprintf(w, "  %s  %s, waits: %s\n", proto.ShortRolloutID(o.RolloutID), o.State, reasonLine(o.Waiting.Code, o.Waiting.Message))
			default:
				fmt.Fprintf(w, "  %s  %s\n", proto.ShortRolloutID(o.RolloutID), o.State)
			}
			for _, ap := range o.Approvals {
				fmt.Fprintf(w, "    approval of wave %d assumed at %s (%s)\n", ap.Wave, when(ap.At), p.rel(ap.At))
			}
		}
	}
}

func (pc *planChannel) write(w io.Writer, p *plan, opts planOptions) {
	fmt.Fprintf(w, "%s: %d of %d host(s) change", proto.ShortRolloutID(pc.RolloutID), pc.ChangeCount, pc.HostCount)
	if n := len(pc.changed); n > 0 && !opts.hosts {
		names := pc.changed[:min(n, planNames)]
		fmt.Fprintf(w, ": %s", strings.Join(names, ", "))
		if n > len(names) {
			fmt.Fprintf(w, " and %d more (--hosts lists them)", n-len(names))
		}
	}
	fmt.Fprintln(w)
	if n := len(pc.silent); n > 0 {
		names := pc.silent[:min(n, planNames)]
		more := ""
		if n > len(names) {
			more = fmt.Sprintf(" and %d more", n-len(names))
		}
		fmt.Fprintf(w, "  %d host(s) not heard at the push, taken as silent for good: %s%s\n", n, strings.Join(names, ", "), more)
	}
	if !pc.Opens {
		switch {
		case pc.lastRolled:
			fmt.Fprintln(w, "  does not open: the channel's last rollout is of this ref already")
		case pc.Held != nil:
			fmt.Fprintf(w, "  does not open within the forecast: [%s] %s\n", pc.Held.Code, pc.Held.Message)
		default:
			fmt.Fprintln(w, "  does not open within the forecast")
		}
		return
	}
	t := newTable("  WAVE", "HOSTS", "CHANGE", "START", "", "DONE", "", "GATE")
	current := slices.IndexFunc(pc.Waves, func(wv planWave) bool { return wv.Done.IsZero() })
	for i, wv := range pc.Waves {
		label := "  " + strconv.Itoa(wv.Index)
		if wv.Name != "" {
			label += " (" + wv.Name + ")"
		}
		gate := "-"
		switch {
		case wv.Start.IsZero() && i == current && pc.Waiting != nil:
			gate = "waits: " + reasonLine(pc.Waiting.Code, "") + " (below)"
		case wv.Gate == nil:
		case wv.Gate.Code == codes.WaveNotActive && wv.Index > 0:
			gate = fmt.Sprintf("after wave %d", wv.Index-1)
		default:
			gate = reasonLine(wv.Gate.Code, wv.Gate.Message)
		}
		t.add(label, strconv.Itoa(wv.HostCount), strconv.Itoa(wv.ChangeCount), when(wv.Start), p.rel(wv.Start), when(wv.Done), p.rel(wv.Done), gate)
	}
	t.write(w)
	for _, ap := range pc.Approvals {
		fmt.Fprintf(w, "  approval of wave %d assumed at %s (%s)\n", ap.Wave, when(ap.At), p.rel(ap.At))
	}
	switch {
	case !pc.End.IsZero():
		fmt.Fprintf(w, "  ends %s (%s): %s\n", when(pc.End), p.rel(pc.End), pc.State)
	case pc.Waiting != nil:
		fmt.Fprintf(w, "  does not end: %s, waits: %s\n", pc.State, reasonLine(pc.Waiting.Code, pc.Waiting.Message))
		if pc.Waiting.Gate == codes.Approval && p.Model.ApproveAfterSeconds == nil {
			fmt.Fprintln(w, "  (no approval is assumed: --approve-after D assumes each D after its wave becomes current)")
		}
	default:
		fmt.Fprintf(w, "  does not end within the forecast: %s\n", pc.State)
	}
	if n := pc.States[reconciler.HostConverged]; n != pc.HostCount {
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(pc.States)) {
			parts = append(parts, fmt.Sprintf("%s %d", s, pc.States[s]))
		}
		fmt.Fprintf(w, "  hosts at the end: %s\n", strings.Join(parts, ", "))
	}
	if opts.hosts && len(pc.Hosts) > 0 {
		ht := newTable("  HOST", "WAVE", "DISPATCH", "", "CONVERGED", "", "STATE", "GATE")
		for _, h := range pc.Hosts {
			gate := "-"
			if h.Gate != nil {
				gate = reasonLine(h.Gate.Code, h.Gate.Message)
			}
			ht.add("  "+h.Host, strconv.Itoa(h.Wave), when(h.Dispatch), p.rel(h.Dispatch), when(h.Converged), p.rel(h.Converged), string(h.State), gate)
		}
		ht.write(w)
	}
}

// rel is a time relative to the push: "+2h10m"; "" for a zero time.
func (p *plan) rel(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(p.At)
	if d < 0 {
		return "-" + span(-d)
	}
	return "+" + span(d)
}

// span writes a duration in days, hours, minutes and seconds, leaving out
// the zero ones: 1d2h, 2h10m, 90s is 1m30s; 0s.
func span(d time.Duration) string {
	d = d.Round(time.Second)
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.unit)
			d -= n * u.d
		}
	}
	return b.String()
}
