package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nixfleet/nixfleet/codes"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/apiclient"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The operator commands talk to the control plane's operator API
// (rfcs/0009-operator-cli.md): status, rollout …, host ….

const connDescription = "The control plane comes from --cp, NIXFLEET_CP_URL or cp in the config file\n" +
	"(flags win over the environment, which wins over the file); likewise --key,\n" +
	"--name, --ca: each config key is its flag's name (cp_url, the old name of cp,\n" +
	"still works). These flags are accepted before the command too."

// opCommand makes an operator command: it takes the connection flags and
// --json besides its own, exactly the positional arguments named, and
// runs with a client of the control plane.
func opCommand(cmd *cli.Command, argNames []string, run func(c *cli.Context, o *operator, args []string) error) *cli.Command {
	cmd.Flags = append(append(cmd.Flags, &cli.BoolFlag{Name: "json", Usage: "print JSON on stdout (shapes in rfcs/0009)"}), connFlags()...)
	if cmd.ArgsUsage == "" && len(argNames) > 0 {
		cmd.ArgsUsage = strings.Join(argNames, " ")
	}
	if cmd.Description == "" {
		cmd.Description = connDescription
	} else {
		cmd.Description += "\n\n" + connDescription
	}
	if cmd.BashComplete == nil && len(argNames) == 1 && argNames[0] == "ID" {
		cmd.BashComplete = completeArg(completeRolloutIDs) // ids from the control plane
	}
	cmd.Action = func(c *cli.Context) error {
		args, err := commandArgs(c, argNames...)
		if errors.Is(err, errHelpShown) {
			return nil
		}
		if err != nil {
			return err
		}
		o, err := dial(c)
		if err != nil {
			return err
		}
		for i, name := range argNames {
			if name == "ID" {
				if args[i], err = o.fullRolloutID(c, args[i]); err != nil {
					return err
				}
			}
		}
		return run(c, o, args)
	}
	return cmd
}

// ---- status ----

func statusCommand() *cli.Command {
	return opCommand(&cli.Command{
		Name:  "status",
		Usage: "show every channel: its release, its latest rollout, wave progress, and what is halted or blocked",
	}, nil, runStatus)
}

func runStatus(c *cli.Context, o *operator, _ []string) error {
	st, raw, err := o.api.Status(c.Context)
	if err != nil {
		return o.fail(c, err, "")
	}
	if c.Bool("json") {
		return writeRaw(c.App.Writer, raw)
	}
	w := c.App.Writer
	lead := "leader"
	if !st.Leader {
		lead = "not leading ticks"
	}
	fmt.Fprintf(w, "control plane %s (replica %s, %s)\n", o.conn.URL, st.Replica, lead)
	if st.InsecureDev {
		fmt.Fprintln(w, o.st.paint(ansiRed, "WARNING: the control plane runs --insecure-dev: no authentication"))
	}
	if wt := st.Watch; wt != nil && wt.WarmingUp {
		fmt.Fprintln(w, o.st.paint(ansiYellow, fmt.Sprintf("watching its hosts since %s: a host not heard from is neither skipped nor failed before %s",
			when(wt.Since), when(wt.JudgesSilenceFrom))))
	}
	if len(st.Channels) == 0 {
		fmt.Fprintln(w, "\nno channel has a verified release yet")
	}
	for _, ch := range st.Channels {
		var full *proto.Rollout
		if ch.Rollout != nil {
			if r, _, err := o.api.Rollout(c.Context, ch.Rollout.ID); err == nil {
				full = &r
			} else if !isNotFound(err) { // pruned since: show the summary
				return o.fail(c, err, "")
			}
		}
		printChannelStatus(w, o.st, ch, full)
	}
	return nil
}

func printChannelStatus(w io.Writer, st style, ch proto.ChannelStatus, full *proto.Rollout) {
	// The git commit is what `git log` of the channel ref shows; the CI
	// commit is the one the release was built from (meta.ciCommit). Both
	// are cut to 12 hex digits, as the control plane's messages cut them.
	fmt.Fprintf(w, "\nchannel %s  commit %s  ci %s  signed %s\n", ch.Name, dash(shortCommit(ch.SourceCommit)), dash(shortCommit(ch.Ref)), when(ch.SignedAt))
	f := &fields{}
	r := ch.Rollout
	if full != nil {
		r = full
	}
	if r == nil {
		f.add("rollout", "none yet")
	} else {
		f.add("rollout", fmt.Sprintf("%s  %s  %s", shortID(r.ID), st.state(shownState(*r)), waveText(*r)))
		if off := reconciler.OffTarget(r.State, r.Counts); off != "" {
			f.add("", st.paint(ansiYellow, off))
		}
		switch reconciler.RolloutState(r.State) {
		case reconciler.RolloutActive, reconciler.RolloutOpening, reconciler.RolloutConverged:
		default:
			f.add(strings.ToLower(shownState(*r)), reasonLine(r.Reason.Code, r.Reason.Message))
		}
		if r.Next != "" {
			f.add("next", r.Next)
		}
		if r.SoakUntil != nil && !terminal(*r) {
			f.add("soak", fmt.Sprintf("wave %d converges at %s if its hosts stay healthy", r.Wave, when(*r.SoakUntil)))
		}
		if full != nil {
			for _, wp := range waveProgressOf(*full) {
				line := wp.text(st)
				if wp.index == full.Wave && !terminal(*full) {
					line += "  <- current"
				}
				f.add(fmt.Sprintf("wave %d", wp.index), line)
			}
		}
		f.add("hosts", countsText(st, r.Counts))
		if full != nil {
			anyHeld := false
			for _, group := range []struct {
				label string
				moves bool
			}{{"waiting", true}, {"stuck", false}} {
				held := heldHosts(*full, group.moves)
				anyHeld = anyHeld || len(held) > 0
				lines := heldLines(held)
				for i, l := range lines {
					if i == 10 {
						more := 0
						for _, l := range lines[i:] {
							more += len(l.hosts)
						}
						f.add("", fmt.Sprintf("… and %d more (nixfleet rollout show %s)", more, shortID(r.ID)))
						break
					}
					label := ""
					if i == 0 {
						label = group.label
					}
					f.add(label, l.text())
				}
			}
			if anyHeld && full.HostsNext != "" {
				// The rollout's hosts came in pages: these were judged
				// from the first.
				f.add("", fmt.Sprintf("(held among its first %d hosts by name; nixfleet host list --rollout %s --state Pending lists every Pending one)",
					len(full.Hosts), r.ID))
			}
		} else if len(r.Waiting) > 0 {
			f.add("blocked", waitingText(r.Waiting))
		}
	}
	switch v := ch.Visibility; {
	case v == nil:
	case v.Ended.IsZero():
		f.add("visibility", st.paint(ansiYellow, fmt.Sprintf("partial since %s: %d of %d hosts late; nothing is skipped, failed for silence, promoted or dispatched until most are heard again",
			when(v.Since), v.Silent, v.Total)))
	default:
		f.add("visibility", fmt.Sprintf("partial from %s to %s; hosts still silent are not judged for an offline threshold after it", when(v.Since), when(v.Ended)))
	}
	if ch.Pending {
		f.add("pending", fmt.Sprintf("ref %s has no rollout yet: it waits for the channel's active rollout or a channel edge", dash(ch.Ref)))
	}
	if lf := ch.LastFailure; lf != nil {
		f.add("refused", fmt.Sprintf("release at commit %s, %s: %s", lf.Commit, when(lf.At), reasonLine(lf.Code, lf.Message)))
	}
	indent(w, f)
}

// indent writes fields two spaces in.
func indent(w io.Writer, f *fields) {
	var b strings.Builder
	f.write(&b)
	for _, l := range strings.SplitAfter(b.String(), "\n") {
		if l != "" {
			fmt.Fprint(w, "  "+l)
		}
	}
}

// terminal reports whether a rollout is over (rfcs/0005).
func terminal(r proto.Rollout) bool { return reconciler.RolloutState(r.State).Terminal() }

// shownState is a rollout's state as text shows it: Paused for one an
// operator paused (reconciler.ShownState); --json keeps Halted.
func shownState(r proto.Rollout) string { return reconciler.ShownState(r.State, r.Reason.Code) }

// heldHosts are the Pending hosts of waves up to the current one that a
// gate holds now, by wave and name: those the fleet frees by itself
// (moves), or those that wait for an operator. A rollout that dispatches
// no more holds none: its hosts wait for nothing.
func heldHosts(r proto.Rollout, moves bool) []proto.RolloutHost {
	var out []proto.RolloutHost
	for _, h := range r.Hosts {
		s := h.Situation
		if h.State == string(reconciler.HostPending) && h.Wave <= r.Wave && s != nil && s.Moves == moves &&
			s.Code != codes.RolloutStopped && s.Code != codes.Waiting && (s.Code == h.Blocked.Gate || !moves) {
			out = append(out, h)
		}
	}
	slices.SortStableFunc(out, func(a, b proto.RolloutHost) int { return a.Wave - b.Wave })
	return out
}

// heldLine is one line of held hosts: those of one wave that one gate
// holds with the same words and the same next step, such as the hosts of
// a wave that waits for its approvals. The step is said once for them all.
type heldLine struct {
	wave                int
	hosts               []string
	code, message, next string
}

// heldNames is how many hosts a held line names before it counts the
// rest.
const heldNames = 3

// heldLines groups held hosts (heldHosts) into lines, in their order.
func heldLines(held []proto.RolloutHost) []heldLine {
	type key struct {
		wave                int
		code, message, next string
	}
	var out []heldLine
	at := map[key]int{} // a line's index
	for _, h := range held {
		s := h.Situation
		k := key{h.Wave, s.Code, s.Message, s.Next}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, heldLine{wave: h.Wave, code: s.Code, message: s.Message, next: s.Next})
		}
		out[i].hosts = append(out[i].hosts, h.Hostname)
	}
	return out
}

// text is "web-1, web-2, web-3 and 4 more (wave 1): [approval] wave 1
// needs 2 approval(s) (none yet); next: …".
func (l heldLine) text() string {
	names := strings.Join(l.hosts[:min(len(l.hosts), heldNames)], ", ")
	if n := len(l.hosts) - heldNames; n > 0 {
		names += fmt.Sprintf(" and %d more", n)
	}
	out := fmt.Sprintf("%s (wave %d): %s", names, l.wave, reasonLine(l.code, l.message))
	if l.next != "" {
		out += "; next: " + l.next
	}
	return out
}

// waveText is where a rollout is among its waves, by their indexes (as
// the journal counts them, from 0).
func waveText(r proto.Rollout) string {
	n := len(r.Waves)
	switch {
	case reconciler.RolloutState(r.State) == reconciler.RolloutConverged:
		return fmt.Sprintf("all %d wave(s) promoted", n)
	case terminal(r):
		return fmt.Sprintf("stopped in wave %s of waves 0-%d", waveName(r, r.Wave), n-1)
	}
	out := fmt.Sprintf("wave %s of waves 0-%d", waveName(r, r.Wave), n-1)
	if reconciler.RolloutState(r.State) == reconciler.RolloutActive && r.WavePhase != "" {
		// Only an active rollout's wave dispatches or soaks: a halted or
		// reverting one's phase is where it stopped, not what happens.
		out += " (" + r.WavePhase + ")"
	}
	return out
}

func waitingText(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// countsText is "Converged 2, Pending 1" in the states' diagram order.
func countsText(st style, counts map[string]int) string {
	var parts []string
	for _, s := range reconciler.HostStates {
		if n := counts[string(s)]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st.state(string(s)), n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// waveProgress is one wave of a rollout: how many of its hosts converged,
// and the others by state.
type waveProgress struct {
	index, soakMinutes, total, converged int
	others                               map[string]int
}

// waveProgressOf counts a rollout's hosts wave by wave: from the
// server's waveCounts, which count every host, or else (an older server)
// from its hosts.
func waveProgressOf(r proto.Rollout) []waveProgress {
	out := make([]waveProgress, len(r.Waves))
	for i, w := range r.Waves {
		out[i] = waveProgress{index: i, soakMinutes: w.SoakMinutes, others: map[string]int{}}
	}
	if len(r.WaveCounts) == len(r.Waves) && len(r.Waves) > 0 {
		for i, counts := range r.WaveCounts {
			for state, n := range counts {
				out[i].total += n
				if state == string(reconciler.HostConverged) {
					out[i].converged += n
				} else if n > 0 {
					out[i].others[state] += n
				}
			}
		}
		return out
	}
	for _, h := range r.Hosts {
		if h.Wave < 0 || h.Wave >= len(out) {
			continue
		}
		wp := &out[h.Wave]
		wp.total++
		if h.State == string(reconciler.HostConverged) {
			wp.converged++
		} else {
			wp.others[h.State]++
		}
	}
	return out
}

// text is "3/4 converged, Failed 1", after a bar on a terminal.
func (wp waveProgress) text(st style) string {
	s := fmt.Sprintf("%d/%d converged", wp.converged, wp.total)
	if st.tty {
		s = progressBar(wp.converged, wp.total, 20) + " " + s
	}
	if len(wp.others) > 0 {
		s += ", " + countsText(st, wp.others)
	}
	return s
}

func isNotFound(err error) bool { return apiclient.IsCode(err, codes.NotFound) }
