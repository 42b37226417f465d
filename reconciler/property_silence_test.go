package reconciler_test

// Property tests of what the control plane may conclude from what it can
// see (rfcs/0013 rules 3–5, rfcs/0003 rules 6–9 and 11). The chaotic
// runs of property_test.go drive them, with outages of the control plane
// (its watch restarts, check-ins are lost meanwhile), partitions of a
// drawn share of a channel's hosts, releases pushed mid-rollout (often
// right after a pause, so that they supersede a rollout with hosts
// soaking) and operator intents. After every tick:
//
//  7. evidence: no host of wave k+1 is dispatched, catch-up included,
//     while its rollout has fewer converged hosts in an earlier wave than
//     the policy's evidence asks for;
//  8. silence is not failure: no host is skipped, failed while soaking,
//     or failed for a confirm window that ran while the control plane
//     could not hear it, in a channel in partial visibility or while the
//     control plane has not watched for an offline threshold (recomputed
//     here from the input);
//  9. health policy: a rollout whose failures (minus those forgiven)
//     exceed healthGate.maxFailures is not left Active, nor Converged while
//     it is its channel's latest (a catch-up failure halts or reverts it),
//     and health_failure fires only past the limit;
//  10. deadlines: an Active rollout past its readiness deadline whose
//     current wave has nothing in flight and nothing waiting for the fleet
//     (budget, busy host, channel or host edge) has been halted;
//  11. landing: no host stays in flight in a terminal rollout longer than
//     its soak or confirm window allows (and, for a window, until the host
//     is offline or past the grace), unless silence or a lost write holds
//     it;
//  12. silence is judged as a cohort (rfcs/0013 rule 4): no host is
//     skipped, failed or timed out for silence while the hosts of its
//     channel that went silent no later than one check-in period after it
//     (the offline threshold less the late threshold) are more than the
//     partial-visibility limit, whatever instants their last check-ins
//     fell on;
//  13. a blind channel holds: no host of a channel is dispatched and no
//     wave of it promoted while more than the limit of its hosts are late,
//     also while the control plane warms up;
//  14. verdicts rest on what the host said (rfcs/0013 rule 8): with a
//     store that loses writes it acknowledged, no host is failed unhealthy
//     unless its agent was unhealthy or off its target at some instant of
//     its soak, and no confirm window is a failure for an activation its
//     agent confirmed or staged for its next boot.

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// TestPropertyPromotionNeedsEvidence: invariant 7.
func TestPropertyPromotionNeedsEvidence(t *testing.T) {
	t.Parallel()
	// Waves whose hosts are all away, failed or deferred are what the
	// invariant is about: partitions and outages come in one step of ten,
	// and it takes two rounds to find a wave promoted without proof in
	// every run tried.
	checkRounds(t, 2, func(t *rapid.T) {
		runChaosWith(t, fleetGenOpts{maxHosts: 300, faults: simFaults{partitionPct: 10, outagePct: 10}}, checkEvidence)
	})
}

// TestPropertySilenceIsNotFailure: invariant 8.
func TestPropertySilenceIsNotFailure(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkSilence) })
}

// TestPropertyHealthPolicyAlwaysApplies: invariant 9.
func TestPropertyHealthPolicyAlwaysApplies(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkHealthPolicy) })
}

// TestPropertyNoSilentStall: invariant 10.
func TestPropertyNoSilentStall(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkDeadline) })
}

// TestPropertyInFlightHostsLand: invariant 11.
func TestPropertyInFlightHostsLand(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) { runChaos(t, checkLanding) })
}

// TestPropertySilenceJudgedAsACohort: invariant 12, with partitions in
// one step of five.
func TestPropertySilenceJudgedAsACohort(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runChaosWith(t, fleetGenOpts{maxHosts: 300, faults: simFaults{partitionPct: 20}}, checkCohort)
	})
}

// TestPropertyBlindChannelHolds: invariant 13, with partitions and
// outages in one step of ten each.
func TestPropertyBlindChannelHolds(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runChaosWith(t, fleetGenOpts{maxHosts: 300, faults: simFaults{partitionPct: 10, outagePct: 10}}, checkBlindHolds)
	})
}

// TestPropertyVerdictsRestOnWhatWasSaid: invariant 14, with a store that
// loses writes in every run.
func TestPropertyVerdictsRestOnWhatWasSaid(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		runChaosWith(t, fleetGenOpts{maxHosts: 300, faults: simFaults{lossy: true}}, checkSaid)
	})
}

// maxSimStep is the longest time between two ticks of the simulation
// (outages aside).
const maxSimStep = 600 * time.Second

// evidenceOf counts a wave's proof (hosts converged on a closure that
// changed) and what it needs: one host, minConverged, minConvergedPct of
// the wave rounded up, whichever is most, capped at the hosts that are not
// converged and unchanged.
func evidenceOf(g proto.HealthGate, hosts []reconciler.RolloutHost) (proven, need int) {
	unchanged := 0
	for _, h := range hosts {
		if h.State == reconciler.HostConverged {
			if h.Previous == h.Target {
				unchanged++
			} else {
				proven++
			}
		}
	}
	n := len(hosts)
	need = 1
	if g.MinConverged != nil {
		need = max(need, *g.MinConverged)
	}
	if g.MinConvergedPct != nil {
		need = max(need, (n**g.MinConvergedPct+99)/100)
	}
	return proven, min(need, n-unchanged)
}

func checkEvidence(_ *rapid.T, c tickCase) []string {
	var problems []string
	index := rolloutIndexByID(c.next)
	for _, e := range c.out.Events {
		if e.Kind != reconciler.EventHostTransition || e.To != string(reconciler.HostActivating) {
			continue
		}
		ri, ok := index[e.RolloutID]
		if !ok {
			continue
		}
		r := c.next.Rollouts[ri]
		byWave := map[int][]reconciler.RolloutHost{}
		for _, h := range r.Hosts {
			byWave[h.Wave] = append(byWave[h.Wave], h)
		}
		for wave := range e.Wave {
			if proven, need := evidenceOf(r.HealthGate, byWave[wave]); proven < need {
				problems = append(problems, fmt.Sprintf("host %s of wave %d dispatched (%s) in %s while wave %d has %d host(s) converged on a new closure of the %d it needs",
					e.Host, e.Wave, e.Reason.Code, r.ID, wave, proven, need))
			}
		}
	}
	return problems
}

// sight is what the control plane could see at a tick's input, as rfcs/0003
// rule 6 defines it.
type sight struct {
	in   reconciler.Input
	warm bool
}

func sightOf(in reconciler.Input) sight {
	t := in.Tunables.OfflineThreshold()
	return sight{in: in, warm: in.WatchingSince.IsZero() || !in.Now.Before(in.WatchingSince.Add(t))}
}

// late: not heard from within the late threshold (half the offline
// threshold), or never.
func (s sight) late(host string) bool {
	o := s.in.Hosts[host]
	return o.LastSeen.IsZero() || s.in.Now.Sub(o.LastSeen) > s.in.Tunables.LateAfter()
}

// channelHosts are the hosts of a channel as rule 6 counts them: those of
// its release and of its latest rollout among rollouts.
func channelHosts(in reconciler.Input, channel string, rollouts []reconciler.Rollout) []string {
	hosts := map[string]bool{}
	for _, c := range in.Channels {
		if c.Name == channel && c.Manifest != nil {
			for _, h := range c.Manifest.HostSet {
				hosts[h.Hostname] = true
			}
		}
	}
	latest := -1
	for i, r := range rollouts {
		if r.Channel == channel && (latest < 0 || r.OpenedAt.After(rollouts[latest].OpenedAt) ||
			(r.OpenedAt.Equal(rollouts[latest].OpenedAt) && r.ID > rollouts[latest].ID)) {
			latest = i
		}
	}
	if latest >= 0 {
		for _, h := range rollouts[latest].Hosts {
			hosts[h.Hostname] = true
		}
	}
	return slices.Sorted(maps.Keys(hosts))
}

// overLimit: more than 50% of hosts, and at least two.
func overLimit(n, of int) bool { return n*100 > 50*of && n >= 2 }

// partial: more than the limit of the channel's hosts are late. A tick
// that opens a rollout judges the channel again over the new rollout's
// hosts, so both the input's rollouts and the tick's result are views the
// tick may have acted on.
func (s sight) partial(channel string, rollouts []reconciler.Rollout) bool {
	hosts := channelHosts(s.in, channel, rollouts)
	late := 0
	for _, h := range hosts {
		if s.late(h) {
			late++
		}
	}
	return overLimit(late, len(hosts))
}

// hostBefore returns a host's record in the tick's input.
func hostBefore(in reconciler.Input, rollout, host string) (reconciler.RolloutHost, bool) {
	for _, r := range in.Rollouts {
		if r.ID == rollout {
			for _, h := range r.Hosts {
				if h.Hostname == host {
					return h, true
				}
			}
		}
	}
	return reconciler.RolloutHost{}, false
}

func checkSilence(_ *rapid.T, c tickCase) []string {
	var problems []string
	s := sightOf(c.in)
	offline := c.in.Tunables.OfflineThreshold()
	// held says why silence is not judged on a channel: the control plane
	// warms up, the channel is in partial visibility (now, or at the last
	// tick), or it left it less than an offline threshold ago. A channel
	// the tick opened a rollout on is in partial visibility if it is over
	// the hosts before the opening and over those after (judged: held
	// under both views) or over either (blind: may be forgiven).
	held := func(channel string, either bool) string {
		before, after := s.partial(channel, c.in.Rollouts), s.partial(channel, c.next.Rollouts)
		switch {
		case !s.warm:
			return fmt.Sprintf("the control plane watches only since %s", c.in.WatchingSince.Format(time.RFC3339))
		case (before && after) || (either && (before || after)):
			return fmt.Sprintf("channel %s is in partial visibility", channel)
		}
		for _, v := range c.in.Visibility {
			if v.Channel == channel && (v.Ended.IsZero() || c.in.Now.Before(v.Ended.Add(offline))) {
				return fmt.Sprintf("channel %s is in partial visibility or recovering from it", channel)
			}
		}
		return ""
	}
	confirm := c.in.Tunables.ConfirmWindow()
	for _, e := range c.out.Events {
		if e.Kind != reconciler.EventHostTransition {
			continue
		}
		why, blindWhy := held(e.Channel, false), held(e.Channel, true)
		switch {
		case e.Reason.Code == codes.Offline || e.Reason.Code == codes.OfflineWhileSoaking:
			if why != "" {
				problems = append(problems, fmt.Sprintf("host %s of %s moved %s→%s (%s) for being silent while %s",
					e.Host, e.RolloutID, e.From, e.To, e.Reason.Code, why))
			}
		case e.Reason.Code == codes.ConfirmTimeout:
			h, ok := hostBefore(c.in, e.RolloutID, e.Host)
			if !ok {
				continue
			}
			// Rule 7: what the host said after its window closed decides
			// (it runs another closure), or else its silence does.
			o := c.in.Hosts[e.Host]
			saidOther := o.Said().After(h.Since.Add(confirm)) && o.Current != h.Target
			blind := c.in.WatchingSince.After(h.Since) || blindWhy != "" || h.Blocked.Code == codes.ConfirmUnheard
			switch {
			case saidOther && blind:
				problems = append(problems, fmt.Sprintf("%s in %s failed with confirm_timeout although it said it runs another closure after a confirm window the control plane could not hear: that is confirm_unheard",
					e.Host, e.RolloutID))
			case !saidOther && why != "":
				problems = append(problems, fmt.Sprintf("%s in %s failed with confirm_timeout for its silence while %s", e.Host, e.RolloutID, why))
			case !saidOther && c.in.Tunables.Heard(o.LastSeen, c.in.Now):
				problems = append(problems, fmt.Sprintf("%s in %s failed with confirm_timeout while it is heard and said nothing that decides", e.Host, e.RolloutID))
			}
		case e.Reason.Code == codes.BootTimeout:
			// Rule 17: what the host said after its boot timeout decides
			// (it runs another closure), or else its silence does.
			h, ok := hostBefore(c.in, e.RolloutID, e.Host)
			if !ok {
				continue
			}
			o := c.in.Hosts[e.Host]
			saidOther := o.Said().After(bootEnd(c.in, e.RolloutID, h)) && o.Current != h.Target
			blind := c.in.WatchingSince.After(h.Since) || blindWhy != "" || h.Blocked.Code == codes.ConfirmUnheard
			switch {
			case saidOther && o.Deferred && blind:
				problems = append(problems, fmt.Sprintf("%s in %s failed with boot_timeout although it says its target is still staged after a reboot order the control plane could not hear: that is reboot_unheard",
					e.Host, e.RolloutID))
			case !saidOther && why != "":
				problems = append(problems, fmt.Sprintf("%s in %s failed with boot_timeout for its silence while %s", e.Host, e.RolloutID, why))
			}
		case e.Reason.Code == codes.RebootUnheard:
			h, ok := hostBefore(c.in, e.RolloutID, e.Host)
			if !ok {
				continue
			}
			o := c.in.Hosts[e.Host]
			if !(c.in.WatchingSince.After(h.Since) || blindWhy != "" || h.Blocked.Code == codes.ConfirmUnheard) {
				problems = append(problems, fmt.Sprintf("%s in %s forgiven as reboot_unheard although the control plane heard it since the reboot order", e.Host, e.RolloutID))
			}
			if !o.Said().After(bootEnd(c.in, e.RolloutID, h)) || !o.Deferred || o.Current == h.Target {
				problems = append(problems, fmt.Sprintf("%s in %s staged again as reboot_unheard without saying, after its boot timeout, that its target is still staged and it runs its previous closure",
					e.Host, e.RolloutID))
			}
		case e.Reason.Code == codes.ConfirmUnheard:
			h, ok := hostBefore(c.in, e.RolloutID, e.Host)
			if !ok {
				continue
			}
			if !(c.in.WatchingSince.After(h.Since) || blindWhy != "" || h.Blocked.Code == codes.ConfirmUnheard) {
				problems = append(problems, fmt.Sprintf("%s in %s forgiven as confirm_unheard although the control plane heard its whole confirm window", e.Host, e.RolloutID))
			}
			act := c.in.Hosts[e.Host].Activation
			reported := act != nil && act.RolloutID == e.RolloutID && act.Outcome == reconciler.OutcomeRolledBack
			if !reported && !c.in.Hosts[e.Host].LastSeen.After(h.Since.Add(confirm)) {
				problems = append(problems, fmt.Sprintf("%s in %s forgiven as confirm_unheard without being heard since its window closed: a switch that cut its network looks just like that",
					e.Host, e.RolloutID))
			}
			if o := c.in.Hosts[e.Host]; !reported && o.Current == h.Target {
				// Rule 7: one that still runs its target had its confirm
				// lost; what it says decides, and it is not skipped.
				problems = append(problems, fmt.Sprintf("%s in %s skipped as confirm_unheard although it says it runs its target %s",
					e.Host, e.RolloutID, h.Target))
			}
		}
	}
	return problems
}

// failuresOf counts a rollout's health failures as rfcs/0003 rule 9 does.
func failuresOf(r reconciler.Rollout) int {
	n := 0
	for _, h := range r.Hosts {
		switch {
		case h.State == reconciler.HostFailed && h.Reason.Code != codes.RollbackTimeout:
			n++
		case h.State == reconciler.HostReverted && h.Reason.Code == codes.AgentRolledBack:
			n++
		}
	}
	return n
}

func maxFailuresOf(r reconciler.Rollout) int {
	if m := r.HealthGate.MaxFailures; m != nil && *m > 0 {
		return *m
	}
	return 0
}

func checkHealthPolicy(_ *rapid.T, c tickCase) []string {
	var problems []string
	latest := map[string]int{}
	for i, r := range c.next.Rollouts {
		if j, ok := latest[r.Channel]; !ok || r.OpenedAt.After(c.next.Rollouts[j].OpenedAt) ||
			(r.OpenedAt.Equal(c.next.Rollouts[j].OpenedAt) && r.ID > c.next.Rollouts[j].ID) {
			latest[r.Channel] = i
		}
	}
	for i, r := range c.next.Rollouts {
		over := failuresOf(r) - r.FailuresForgiven - maxFailuresOf(r)
		if over <= 0 {
			continue
		}
		if r.State == reconciler.RolloutActive || (r.State == reconciler.RolloutConverged && latest[r.Channel] == i) {
			problems = append(problems, fmt.Sprintf("%s is %s with %d failed host(s) (%d forgiven), over healthGate.maxFailures %d: onHealthFailure %q did not apply",
				r.ID, r.State, failuresOf(r), r.FailuresForgiven, maxFailuresOf(r), r.OnHealthFailure))
		}
	}
	// health_failure fires only past the limit: the rollout's hosts are
	// replayed from the input through the tick's events up to it.
	index := rolloutIndexByID(c.next)
	type key struct{ rollout, host string }
	states := map[key]reconciler.RolloutHost{}
	for _, r := range c.in.Rollouts {
		for _, h := range r.Hosts {
			states[key{r.ID, h.Hostname}] = h
		}
	}
	for _, e := range c.out.Events {
		if e.Kind == reconciler.EventHostTransition {
			states[key{e.RolloutID, e.Host}] = reconciler.RolloutHost{Hostname: e.Host, State: reconciler.HostState(e.To), Reason: e.Reason}
			continue
		}
		if e.Kind != reconciler.EventRolloutTransition || e.Reason.Code != codes.HealthFailure {
			continue
		}
		ri, ok := index[e.RolloutID]
		if !ok {
			continue
		}
		r := c.next.Rollouts[ri]
		then := r
		then.Hosts = nil
		for _, h := range r.Hosts {
			if st, ok := states[key{r.ID, h.Hostname}]; ok {
				then.Hosts = append(then.Hosts, st)
			}
		}
		if failuresOf(then)-r.FailuresForgiven <= maxFailuresOf(r) {
			problems = append(problems, fmt.Sprintf("%s moved %s→%s for health_failure with only %d failure(s) (%d forgiven, maxFailures %d)",
				r.ID, e.From, e.To, failuresOf(then), r.FailuresForgiven, maxFailuresOf(r)))
		}
	}
	return problems
}

func checkDeadline(_ *rapid.T, c tickCase) []string {
	var problems []string
	for _, r := range c.next.Rollouts {
		if r.State != reconciler.RolloutActive {
			continue
		}
		start := r.ProgressAt
		for _, t := range []time.Time{r.WaveStartedAt, c.next.WatchingSince} {
			if t.After(start) {
				start = t
			}
		}
		soak := time.Duration(0)
		if r.Wave >= 0 && r.Wave < len(r.Waves) {
			soak = time.Duration(r.Waves[r.Wave].SoakMinutes) * time.Minute
		}
		if c.next.Now.Sub(start) <= reconciler.DefaultReadinessDeadline+soak {
			continue
		}
		waiting := false
		for _, h := range r.Hosts {
			if h.Wave != r.Wave {
				continue
			}
			switch {
			case simInFlight(h.State) && h.Blocked.Gate == codes.PartialVisibility:
				// silent in flight under partial visibility: not moving
			case simInFlight(h.State):
				waiting = true
			case h.State == reconciler.HostPending && slices.Contains([]string{codes.Budget, codes.Busy,
				codes.ChannelEdge, codes.HostEdge}, h.Blocked.Gate):
				waiting = true
			case h.State == reconciler.HostPending && slices.Contains([]string{codes.Window, codes.Freeze, codes.Approval}, h.Blocked.Gate):
				// waiting for its window to open, a freeze to end or its
				// approvals (rules 13–15): time or approvers move it
				waiting = true
			case h.State == reconciler.HostPending && h.Blocked.Gate == codes.Unheard:
				// held while the control plane warms up or the channel
				// recovers: judged within one offline threshold
				waiting = true
			}
		}
		if !waiting {
			problems = append(problems, fmt.Sprintf("%s is Active at wave %d, %s after its last progress (%s), with nothing in flight or waiting for the fleet, and no stall",
				r.ID, r.Wave, c.next.Now.Sub(start), start.Format(time.RFC3339)))
		}
	}
	return problems
}

func checkLanding(_ *rapid.T, c tickCase) []string {
	var problems []string
	confirm, offline := c.next.Tunables.ConfirmWindow(), c.next.Tunables.OfflineThreshold()
	for _, r := range c.next.Rollouts {
		if !r.State.Terminal() {
			continue
		}
		for _, h := range r.Hosts {
			if !simInFlight(h.State) || h.Blocked.Gate == codes.Unheard || h.Blocked.Gate == codes.PartialVisibility {
				continue
			}
			// A window that closed on a host not heard from since is judged
			// once the host is offline; one on a host still on its target,
			// after the grace (0003 rule 7); either at a tick.
			bound := confirm + max(c.next.Tunables.ConfirmGrace(), offline) + maxSimStep
			if o := c.next.Hosts[h.Hostname]; o.StatusAt.Before(o.LastSeen) {
				continue // what the host said last was lost: it waits for it
			}
			if h.State == reconciler.HostSoaking {
				bound = offline + maxSimStep
				if h.Wave >= 0 && h.Wave < len(r.Waves) {
					bound += time.Duration(r.Waves[h.Wave].SoakMinutes) * time.Minute
				}
			}
			if d := c.next.Now.Sub(h.Since); d > bound {
				problems = append(problems, fmt.Sprintf("host %s is %s in %s (%s) for %s, longer than the %s it may take to land",
					h.Hostname, h.State, r.ID, r.State, d, bound))
			}
		}
	}
	return problems
}

// silenceVerdict reports whether a transition judged its host's silence:
// skipped or failed offline, or a confirm or rollback window counted as a
// failure on a host not heard from since the window closed.
func silenceVerdict(c tickCase, e reconciler.Event) bool {
	if e.Kind != reconciler.EventHostTransition {
		return false
	}
	switch e.Reason.Code {
	case codes.Offline, codes.OfflineWhileSoaking:
		return true
	case codes.ConfirmTimeout, codes.RollbackTimeout:
		h, ok := hostBefore(c.in, e.RolloutID, e.Host)
		return ok && !c.in.Hosts[e.Host].LastSeen.After(h.Since.Add(c.in.Tunables.ConfirmWindow()))
	case codes.BootTimeout:
		h, ok := hostBefore(c.in, e.RolloutID, e.Host)
		return ok && !c.in.Hosts[e.Host].LastSeen.After(bootEnd(c.in, e.RolloutID, h))
	}
	return false
}

// bootEnd is when a rebooting host's boot timeout ends (rule 17).
func bootEnd(in reconciler.Input, rollout string, h reconciler.RolloutHost) time.Time {
	for i := range in.Rollouts {
		if r := &in.Rollouts[i]; r.ID == rollout {
			if d := r.RebootOf(h.Wave).Timeout; d > 0 {
				return h.Since.Add(d)
			}
		}
	}
	return h.Since.Add(in.Tunables.ConfirmWindow())
}

func checkCohort(_ *rapid.T, c tickCase) []string {
	var problems []string
	together := c.in.Tunables.OfflineThreshold() - c.in.Tunables.LateAfter()
	for _, e := range c.out.Events {
		if !silenceVerdict(c, e) {
			continue
		}
		last := c.in.Hosts[e.Host].LastSeen
		over := true
		var detail string
		for _, rollouts := range [][]reconciler.Rollout{c.in.Rollouts, c.next.Rollouts} {
			hosts := channelHosts(c.in, e.Channel, rollouts)
			n := 0
			for _, g := range hosts {
				if seen := c.in.Hosts[g].LastSeen; seen.IsZero() || !seen.After(last.Add(together)) {
					n++
				}
			}
			over = over && overLimit(n, len(hosts))
			detail = fmt.Sprintf("%d of its channel's %d hosts have not been heard from since %s, %s after its last check-in at %s",
				n, len(hosts), last.Add(together).Format(time.RFC3339), together, last.Format(time.RFC3339))
		}
		if over {
			problems = append(problems, fmt.Sprintf("host %s of %s moved %s→%s (%s) for its silence, although %s: they went silent together",
				e.Host, e.RolloutID, e.From, e.To, e.Reason.Code, detail))
		}
	}
	return problems
}

func checkBlindHolds(_ *rapid.T, c tickCase) []string {
	var problems []string
	s := sightOf(c.in)
	blind := func(channel string) bool {
		return s.partial(channel, c.in.Rollouts) && s.partial(channel, c.next.Rollouts)
	}
	watch := ""
	if !s.warm {
		watch = fmt.Sprintf(" (the control plane watches only since %s)", c.in.WatchingSince.Format(time.RFC3339))
	}
	for _, e := range c.out.Events {
		moved := ""
		switch {
		case e.Kind == reconciler.EventHostTransition && e.To == string(reconciler.HostActivating):
			moved = fmt.Sprintf("host %s dispatched (%s)", e.Host, e.Reason.Code)
		case e.Kind == reconciler.EventHostTransition && e.To == string(reconciler.HostRebooting):
			moved = fmt.Sprintf("host %s rebooted (%s)", e.Host, e.Reason.Code)
		case e.Kind == reconciler.EventWavePromoted:
			moved = fmt.Sprintf("wave %d promoted", e.Wave)
		case e.Kind == reconciler.EventRolloutTransition && e.To == string(reconciler.RolloutConverged) && e.From == string(reconciler.RolloutActive):
			moved = "its last wave promoted"
		}
		if moved != "" && blind(e.Channel) {
			problems = append(problems, fmt.Sprintf("%s in %s while more than half of channel %s's hosts are late%s", moved, e.RolloutID, e.Channel, watch))
		}
	}
	return problems
}

func checkSaid(_ *rapid.T, c tickCase) []string {
	var problems []string
	for _, e := range c.out.Events {
		if e.Kind != reconciler.EventHostTransition || e.To != string(reconciler.HostFailed) {
			continue
		}
		h, ok := hostBefore(c.in, e.RolloutID, e.Host)
		a := c.sim.agents[e.Host]
		if !ok || a == nil {
			continue
		}
		switch e.Reason.Code {
		case codes.Unhealthy:
			bad := false
			for i, st := range a.health {
				until := c.in.Now.Add(time.Nanosecond)
				if i+1 < len(a.health) {
					until = a.health[i+1].from
				}
				if until.After(h.Since) && !st.from.After(c.in.Now) && (st.sick || st.current != h.Target) {
					bad = true
				}
			}
			if !bad {
				problems = append(problems, fmt.Sprintf("host %s of %s failed unhealthy (%s), but its agent ran the target, healthy, from %s on: the verdict rests on a status the host did not say",
					e.Host, e.RolloutID, e.Reason.Message, h.Since.Format(time.RFC3339)))
			}
		case codes.ConfirmTimeout:
			// A host not heard since its window closed, or silent now
			// without having said after it that it runs another closure,
			// is judged on its silence, which invariant 4 governs
			// (checkSilence).
			o, end := c.in.Hosts[e.Host], h.Since.Add(c.in.Tunables.ConfirmWindow())
			saidOther := o.Said().After(end) && o.Current != h.Target
			silent := !o.LastSeen.After(end) || (!c.in.Tunables.Heard(o.LastSeen, c.in.Now) && !saidOther)
			if at, fine := a.fine[[2]string{e.RolloutID, h.Target}]; fine && !at.Before(h.Since) && !silent {
				problems = append(problems, fmt.Sprintf("host %s of %s failed confirm_timeout, but its agent confirmed (or staged) the activation at %s: the verdict rests on a record the store lost",
					e.Host, e.RolloutID, at.Format(time.RFC3339Nano)))
			}
		}
	}
	return problems
}
