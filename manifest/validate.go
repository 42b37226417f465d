package manifest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nixfleet/nixfleet/analysis"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/schedule"
	"github.com/nixfleet/nixfleet/trust"
)

// ErrInvalidFleet is wrapped by the *ValidationError ValidateFleet returns.
var ErrInvalidFleet = errors.New("manifest: invalid fleet")

// ValidationError lists every problem found in a fleet, not just the first.
type ValidationError struct {
	Problems []string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid fleet: %d problem(s): %s", len(e.Problems), strings.Join(e.Problems, "; "))
}

// Unwrap makes errors.Is(err, ErrInvalidFleet) true.
func (e *ValidationError) Unwrap() error { return ErrInvalidFleet }

// TightBudgetHosts is the host count from which a budget that admits one
// host at a time draws a warning.
const TightBudgetHosts = 10

var (
	// Channel names become git refs (refs/heads/channels/<name>), rollout
	// ids and file names, hence the narrower set.
	channelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$`)
	commitRE  = regexp.MustCompile(`^[0-9a-f]{7,64}$`)
	// Budget and wave names label events and tables: short, and free of
	// the spaces, '=' and ';' of a selector's short form.
	labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,` + strconv.Itoa(MaxLabelLen-1) + `}$`)
)

// MaxLabelLen bounds the name of a disruption budget or of a wave.
const MaxLabelLen = 40

// validHostname: [A-Za-z0-9][A-Za-z0-9._-]{0,252}. Hand-written: it runs
// once per host.
func validHostname(s string) bool {
	if len(s) == 0 || len(s) > 253 || !isAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// validClosure: a store path basename, 32 characters of Nix's base32
// alphabet, a dash, and a name of [A-Za-z0-9+._?=-]. A table per byte:
// it runs once per host.
func validClosure(s string) bool {
	if len(s) < 34 || s[32] != '-' {
		return false
	}
	for i := range 32 {
		if !nixBase32[s[i]] {
			return false
		}
	}
	for i := 33; i < len(s); i++ {
		if !storeNameByte[s[i]] {
			return false
		}
	}
	return true
}

// nixBase32 and storeNameByte are the bytes of a store path's hash part
// and of its name part.
var nixBase32, storeNameByte = byteSet("0123456789abcdfghijklmnpqrsvwxyz"),
	byteSet("+._?=-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

func byteSet(chars string) (set [256]bool) {
	for i := range len(chars) {
		set[chars[i]] = true
	}
	return set
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ValidateFleet checks the rules the Nix library checks at evaluation time,
// again, on a decoded fleet.resolved:
//
//   - the fleet has a channel; every host's channel and every channel's
//     rollout policy exist; names
//     are well-formed; closure hashes are store path basenames; pubkeys are
//     OpenSSH ed25519 keys;
//   - every host with a closure is listed by some wave of its channel, or
//     its channel is rolled out all at once (an empty waves.<channel>,
//     AllAtOnce: one wave holding every host of the channel), and wave
//     lists name existing hosts;
//   - host edges name existing hosts on one channel and form a DAG, and no
//     edge makes a host wait for a host of a later wave of the channel
//     (waves are numbered by the first wave of waves.<channel> that lists
//     a host, every host of an all-at-once channel is in wave 0; hosts no
//     wave lists are not checked); channel edges name existing channels
//     and form a DAG;
//   - freshnessWindow >= 2 × signingIntervalMinutes, and positive;
//   - compliance modes and onHealthFailure are known values; health-gate
//     counts are not negative, minConverged is at least 1 and
//     minConvergedPct is between 1 and 100; every analysis has a name,
//     unique in its gate, and passes analysis.Problems;
//   - selectors do not carry the evaluation-time "and"/"not";
//   - a disruption budget can admit at least one host: maxInFlight 0, or a
//     maxInFlightPct that rounds down to 0 on the budget's hosts, is an
//     error;
//   - budget and wave names, where given, are letters, digits, '.', '_'
//     and '-', at most MaxLabelLen long, starting with a letter or digit;
//     a budget's name is unique among the fleet's budgets, and no other
//     budget's label (Selector.Short, when it has no name) equals it; a
//     wave's name is unique in its policy;
//   - maintenance windows (of a policy, a policy wave, a resolved wave, a
//     policy's hostWindows) have distinct known days, a start HH:MM, a
//     duration of 1 to 10080 minutes and an IANA time zone (schedule.Check);
//     a hostWindows entry has at least one window;
//   - a wave's approval gives approvers only with required, from 1 to
//     MaxApprovers;
//   - a freeze ends after it begins, has a one-line reason of at most
//     MaxFreezeReasonLen bytes, and names declared channels, once each;
//   - a policy's reboot has a bootTimeoutMinutes of 1 to
//     MaxBootTimeoutMinutes, and a wave's reboot true (of the policy, or
//     of waves.<channel>, against the channel's policy) needs the policy's
//     reboot (which gives the timeout); a host's bootLoader, when
//     declared, is systemd-boot, grub or none, and a host whose declared
//     loader cannot boot once into an entry (none: not in
//     proto.BootLoaders) is not on a channel whose policy lets the control
//     plane reboot any of its waves (proto.RolloutPolicy.RebootAllowed).
//     Hosts that declare no loader are the agent's to refuse.
//
// It returns warnings (hosts without a closure, selectors that match
// nothing, budgets of 1 over TightBudgetHosts or more hosts, budgets
// without a limit, unnamed budgets whose short forms coincide) and, when anything is wrong, a *ValidationError listing
// every problem.
func ValidateFleet(f *proto.FleetResolved) (warnings []string, err error) {
	v := &validator{f: f}
	v.run()
	if len(v.errs) > 0 {
		return v.warns, &ValidationError{Problems: v.errs}
	}
	return v.warns, nil
}

type validator struct {
	f *proto.FleetResolved
	// first holds, per channel of f.Waves, the wave of each host a wave
	// places (hostWaves); waves fills it.
	first map[string]map[string]int
	// hostNames are f's hostnames, sorted once (sortedHosts): a large
	// fleet's take a while to sort.
	hostNames []string
	errs      []string
	warns     []string
}

// sortedHosts returns the fleet's hostnames in order.
func (v *validator) sortedHosts() []string {
	if v.hostNames == nil {
		v.hostNames = sortedKeys(v.f.Hosts)
	}
	return v.hostNames
}

func (v *validator) errorf(format string, args ...any) {
	v.errs = append(v.errs, fmt.Sprintf(format, args...))
}

func (v *validator) warnf(format string, args ...any) {
	v.warns = append(v.warns, fmt.Sprintf(format, args...))
}

func (v *validator) run() {
	f := v.f
	if f.SchemaVersion != proto.SchemaVersion {
		v.errorf("schemaVersion is %d, want %d", f.SchemaVersion, proto.SchemaVersion)
	}
	if c := f.Meta.CICommit; c != nil && !commitRE.MatchString(*c) {
		v.errorf("meta.ciCommit %q is not a hex commit id", *c)
	}
	// A large fleet's hosts are checked on another core while this one
	// checks the rest; their problems are listed in the same order as
	// when one core checks everything.
	names := v.sortedHosts()
	hv := &validator{f: f, hostNames: names}
	rest := &validator{f: f, hostNames: names}
	if len(names) >= parallelHosts {
		done := make(chan struct{})
		go func() { defer close(done); hv.hosts() }()
		rest.rest()
		<-done
	} else {
		hv.hosts()
		rest.rest()
	}
	v.errs = slices.Concat(v.errs, hv.errs, rest.errs)
	v.warns = slices.Concat(v.warns, hv.warns, rest.warns)
}

// parallelHosts is the fleet size from which run checks the hosts on a
// goroutine of their own.
const parallelHosts = 4096

// rest runs every check but those of the fleet's header and its hosts.
func (v *validator) rest() {
	v.channels()
	v.policies()
	v.waves()
	v.hostEdges()
	v.channelEdges()
	v.budgets()
	v.freezes()
}

func (v *validator) hosts() {
	for _, name := range v.sortedHosts() {
		h := v.f.Hosts[name]
		if !validHostname(name) {
			v.errorf("host %q: name must be letters, digits, '.', '_' or '-'", name)
		}
		if _, ok := v.f.Channels[h.Channel]; !ok {
			v.errorf("host %q: channel %q does not exist", name, h.Channel)
		}
		switch {
		case h.ClosureHash == nil:
			v.warnf("host %q has no closureHash; it is not part of any rollout", name)
		case !validClosure(*h.ClosureHash):
			v.errorf("host %q: closureHash %q is not a Nix store path basename", name, *h.ClosureHash)
		}
		if h.Pubkey != nil {
			if _, err := trust.ParseSSHEd25519(*h.Pubkey); err != nil {
				v.errorf("host %q: pubkey: %v", name, err)
			}
		}
		v.bootLoader(name, h)
	}
}

// bootLoaders are the values a host's bootLoader may take.
var bootLoaders = []string{proto.BootLoaderSystemdBoot, proto.BootLoaderGrub, proto.BootLoaderNone}

// bootLoader checks a host's declared boot loader: a known one, and one
// that can boot once into an entry when the host's channel reboots hosts.
func (v *validator) bootLoader(name string, h proto.Host) {
	switch {
	case h.BootLoader == "":
	case !slices.Contains(bootLoaders, h.BootLoader):
		v.errorf("host %q: bootLoader %q is not systemd-boot, grub or none", name, h.BootLoader)
	case !slices.Contains(proto.BootLoaders, h.BootLoader):
		c, ok := v.f.Channels[h.Channel]
		if !ok {
			return
		}
		if p, ok := v.f.RolloutPolicies[c.RolloutPolicy]; ok && rebootsAnyWave(&p) {
			v.errorf("host %q: channel %q lets the control plane reboot hosts (rollout policy %q), but bootLoader %q cannot boot once into an entry; only systemd-boot and grub can",
				name, h.Channel, c.RolloutPolicy, h.BootLoader)
		}
	}
}

// rebootsAnyWave reports whether the control plane may reboot the hosts
// of some wave of p; a policy without waves rolls out in one wave.
func rebootsAnyWave(p *proto.RolloutPolicy) bool {
	for i := range max(len(p.Waves), 1) {
		if p.RebootAllowed(i) {
			return true
		}
	}
	return false
}

func (v *validator) channels() {
	if len(v.f.Channels) == 0 {
		v.errorf("the fleet declares no channel")
	}
	for _, name := range sortedKeys(v.f.Channels) {
		c := v.f.Channels[name]
		if !channelRE.MatchString(name) || strings.HasSuffix(name, ".lock") {
			v.errorf("channel %q: name must be letters, digits, '_', '-' and single inner dots (it becomes a git ref)", name)
		}
		if _, ok := v.f.RolloutPolicies[c.RolloutPolicy]; !ok {
			v.errorf("channel %q: rollout policy %q does not exist", name, c.RolloutPolicy)
		}
		switch {
		case c.FreshnessWindow <= 0 || c.FreshnessWindow > trust.MaxWindowMinutes:
			v.errorf("channel %q: freshnessWindow %d must be between 1 and %d minutes", name, c.FreshnessWindow, trust.MaxWindowMinutes)
		case c.SigningIntervalMinutes < 0:
			v.errorf("channel %q: signingIntervalMinutes %d is negative", name, c.SigningIntervalMinutes)
		case c.FreshnessWindow < 2*c.SigningIntervalMinutes:
			v.errorf("channel %q: freshnessWindow (%d) must be >= 2 × signingIntervalMinutes (%d), so one missed signing run does not strand hosts",
				name, c.FreshnessWindow, c.SigningIntervalMinutes)
		}
		switch c.Compliance.Mode {
		case "", proto.ComplianceDisabled, proto.CompliancePermissive, proto.ComplianceEnforce:
		default:
			v.errorf("channel %q: compliance.mode %q is not disabled, permissive or enforce", name, c.Compliance.Mode)
		}
	}
}

func (v *validator) policies() {
	for _, name := range sortedKeys(v.f.RolloutPolicies) {
		p := v.f.RolloutPolicies[name]
		switch p.OnHealthFailure {
		case proto.OnHealthFailureHalt, proto.OnHealthFailureRollbackAndHalt:
		default:
			v.errorf("rollout policy %q: onHealthFailure %q is not halt or rollback-and-halt", name, p.OnHealthFailure)
		}
		waveNames := map[string]int{}
		for i, w := range p.Waves {
			where := fmt.Sprintf("rollout policy %q wave %d", name, i)
			if w.Name != "" && v.label(where, w.Name) {
				if j, dup := waveNames[w.Name]; dup {
					v.errorf("%s: name %q is already wave %d's", where, w.Name, j)
				} else {
					waveNames[w.Name] = i
				}
			}
			v.selector(where, w.Selector)
			if w.SoakMinutes < 0 {
				v.errorf("%s: soakMinutes %d is negative", where, w.SoakMinutes)
			}
			v.windows(where, w.Windows)
			v.approval(where, w.Approval)
			if w.Reboot != nil && *w.Reboot && p.Reboot == nil {
				v.errorf("%s: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes", where)
			}
		}
		v.windows(fmt.Sprintf("rollout policy %q", name), p.Windows)
		for i, hw := range p.HostWindows {
			where := fmt.Sprintf("rollout policy %q hostWindows[%d]", name, i)
			v.selector(where, hw.Selector)
			if len(hw.Windows) == 0 {
				v.errorf("%s: windows is empty", where)
			}
			v.windows(where, hw.Windows)
		}
		g := p.HealthGate
		if g.MaxFailures != nil && *g.MaxFailures < 0 {
			v.errorf("rollout policy %q: healthGate.maxFailures %d is negative", name, *g.MaxFailures)
		}
		if g.SystemdFailedUnits != nil && g.SystemdFailedUnits.Max < 0 {
			v.errorf("rollout policy %q: healthGate.systemdFailedUnits.max %d is negative", name, g.SystemdFailedUnits.Max)
		}
		if g.MinConverged != nil && *g.MinConverged < 1 {
			v.errorf("rollout policy %q: healthGate.minConverged %d must be at least 1", name, *g.MinConverged)
		}
		if p := g.MinConvergedPct; p != nil && (*p < 1 || *p > 100) {
			v.errorf("rollout policy %q: healthGate.minConvergedPct %d must be between 1 and 100", name, *p)
		}
		v.analyses(name, g.Analysis)
		if r := p.Reboot; r != nil && (r.BootTimeoutMinutes < 1 || r.BootTimeoutMinutes > MaxBootTimeoutMinutes) {
			v.errorf("rollout policy %q: reboot.bootTimeoutMinutes %d must be between 1 and %d", name, r.BootTimeoutMinutes, MaxBootTimeoutMinutes)
		}
	}
}

// MaxBootTimeoutMinutes bounds a reboot policy's bootTimeoutMinutes (a
// day).
const MaxBootTimeoutMinutes = 1440

// AnalysesProblems lists what is wrong with a health gate's analyses as
// ValidateFleet words it, each prefixed "analysis[i]" instead of its
// place in a fleet: for analyses that come without a fleet (an ad hoc
// trial, POST /v1/analysis/trials).
func AnalysesProblems(as []proto.Analysis) []string {
	v := &validator{}
	v.analysesAt(func(i int) string { return fmt.Sprintf("analysis[%d]", i) }, as)
	return v.errs
}

// analyses checks a health gate's analyses (rfcs/0001 §2.3): each has a
// name (a label, unique in the gate) and what analysis.Problems asks.
func (v *validator) analyses(policy string, as []proto.Analysis) {
	v.analysesAt(func(i int) string { return fmt.Sprintf("rollout policy %q: healthGate.analysis[%d]", policy, i) }, as)
}

func (v *validator) analysesAt(at func(i int) string, as []proto.Analysis) {
	names := map[string]int{}
	for i, a := range as {
		where := at(i)
		switch {
		case a.Name == "":
			v.errorf("%s: name is empty", where)
		case v.label(where, a.Name):
			if j, dup := names[a.Name]; dup {
				v.errorf("%s: name %q is already analysis[%d]'s", where, a.Name, j)
			} else {
				names[a.Name] = i
			}
		}
		for _, p := range analysis.Problems(a) {
			v.errorf("%s: %s", where, p)
		}
	}
}

// windows checks maintenance windows (rfcs/0001 §2.2).
func (v *validator) windows(where string, ws []proto.Window) {
	for i, w := range ws {
		if err := schedule.Check(w); err != nil {
			v.errorf("%s: windows[%d]: %v", where, i, err)
		}
	}
}

// MaxApprovers bounds a wave's approvals.
const MaxApprovers = 100

// approval checks a wave's approval gate: approvers only with required,
// and from 1 to MaxApprovers.
func (v *validator) approval(where string, a *proto.Approval) {
	if a == nil || a.Approvers == 0 {
		return
	}
	if a.Approvers < 1 || a.Approvers > MaxApprovers {
		v.errorf("%s: approval.approvers %d must be between 1 and %d", where, a.Approvers, MaxApprovers)
	}
	if !a.Required {
		v.errorf("%s: approval.approvers without approval.required = true", where)
	}
}

// freezes checks the fleet's freezes: a real period, a reason, declared
// channels.
func (v *validator) freezes() {
	for i, f := range v.f.Freezes {
		where := fmt.Sprintf("freezes[%d]", i)
		if !f.Until.After(f.From) {
			v.errorf("%s: until %s is not after from %s", where, f.Until.Format(time.RFC3339), f.From.Format(time.RFC3339))
		}
		switch {
		case strings.TrimSpace(f.Reason) == "":
			v.errorf("%s: reason is empty; say why nothing may roll out", where)
		case len(f.Reason) > MaxFreezeReasonLen || strings.ContainsFunc(f.Reason, unicode.IsControl):
			v.errorf("%s: reason must be at most %d bytes on one line", where, MaxFreezeReasonLen)
		}
		seen := map[string]bool{}
		for _, ch := range f.Channels {
			if _, ok := v.f.Channels[ch]; !ok {
				v.errorf("%s: channel %q does not exist", where, ch)
			}
			if seen[ch] {
				v.errorf("%s: channel %q is listed twice", where, ch)
			}
			seen[ch] = true
		}
	}
}

// MaxFreezeReasonLen bounds a freeze's reason.
const MaxFreezeReasonLen = 200

func (v *validator) selector(where string, s proto.Selector) {
	if s.UsesCombinators() {
		v.errorf("%s: selector uses \"and\"/\"not\", which are resolved at evaluation time and have no meaning in fleet.resolved", where)
		return
	}
	if s.Count(v.f.Hosts) == 0 {
		v.warnf("%s: selector matches no host", where)
	}
}

func (v *validator) waves() {
	for _, ch := range sortedKeys(v.f.Waves) {
		if _, ok := v.f.Channels[ch]; !ok {
			v.errorf("waves: channel %q does not exist", ch)
		}
		for i, w := range v.f.Waves[ch] {
			v.label(fmt.Sprintf("waves.%s[%d]", ch, i), w.Name)
			v.windows(fmt.Sprintf("waves.%s[%d]", ch, i), w.Windows)
			v.approval(fmt.Sprintf("waves.%s[%d]", ch, i), w.Approval)
			if w.Reboot != nil && *w.Reboot && !v.channelHasReboot(ch) {
				v.errorf("waves.%s[%d]: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes", ch, i)
			}
			if w.SoakMinutes < 0 {
				v.errorf("waves.%s[%d]: soakMinutes %d is negative", ch, i, w.SoakMinutes)
			}
			for _, h := range w.Hosts {
				if _, ok := v.f.Hosts[h]; !ok {
					v.errorf("waves.%s[%d]: host %q does not exist", ch, i, h)
				}
			}
		}
	}
	v.first = map[string]map[string]int{}
	for ch := range v.f.Waves {
		v.first[ch] = hostWaves(v.f, ch)
	}
	for _, name := range v.sortedHosts() {
		h := v.f.Hosts[name]
		if h.ClosureHash == nil {
			continue
		}
		_, known := v.f.Channels[h.Channel]
		if _, listed := v.first[h.Channel][name]; known && !listed {
			v.errorf("host %q: no wave of channel %q lists it, so it would never be rolled out", name, h.Channel)
		}
	}
}

// channelHasReboot reports whether channel ch's policy has a reboot
// step; true when the channel or its policy does not exist (reported
// elsewhere).
func (v *validator) channelHasReboot(ch string) bool {
	c, ok := v.f.Channels[ch]
	if !ok {
		return true
	}
	p, ok := v.f.RolloutPolicies[c.RolloutPolicy]
	return !ok || p.Reboot != nil
}

func (v *validator) hostEdges() {
	var graph [][2]string
	for i, e := range v.f.Edges {
		a, okA := v.f.Hosts[e.Gates]
		b, okB := v.f.Hosts[e.Gated]
		switch {
		case !okA:
			v.errorf("edges[%d]: gates host %q does not exist", i, e.Gates)
		case !okB:
			v.errorf("edges[%d]: gated host %q does not exist", i, e.Gated)
		case e.Gates == e.Gated:
			v.errorf("edges[%d]: host %q gates itself", i, e.Gates)
		case a.Channel != b.Channel:
			v.errorf("edges[%d]: %q (channel %q) and %q (channel %q) are on different channels; use channelEdges to order channels",
				i, e.Gates, a.Channel, e.Gated, b.Channel)
		default:
			// A backward edge still takes part in the cycle search: a
			// cycle across waves is reported both ways.
			graph = append(graph, [2]string{e.Gates, e.Gated})
			v.edgeAgainstWaves(i, e, a.Channel)
		}
	}
	if cycle := findCycle(graph); cycle != nil {
		v.errorf("edges form a cycle: %s", strings.Join(cycle, " -> "))
	}
}

// edgeAgainstWaves refuses an edge whose gated host is in an earlier wave
// of channel than its gates host: the gated host's wave would wait for a
// host whose wave cannot start before the gated host's wave is promoted.
// Hosts that no wave of the channel lists are not checked; the hosts of a
// channel rolled out all at once are all in wave 0, so no edge between
// them runs against the order.
func (v *validator) edgeAgainstWaves(i int, e proto.Edge, channel string) {
	first := v.first[channel]
	wa, okA := first[e.Gates]
	wb, okB := first[e.Gated]
	if okA && okB && wa > wb {
		v.errorf("edges[%d]: %q (wave %d of channel %q) gates %q (wave %d), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave",
			i, e.Gates, wa, channel, e.Gated, wb)
	}
}

func (v *validator) channelEdges() {
	var graph [][2]string
	for i, e := range v.f.ChannelEdges {
		_, okA := v.f.Channels[e.Gates]
		_, okB := v.f.Channels[e.Gated]
		switch {
		case !okA:
			v.errorf("channelEdges[%d]: gates channel %q does not exist", i, e.Gates)
		case !okB:
			v.errorf("channelEdges[%d]: gated channel %q does not exist", i, e.Gated)
		case e.Gates == e.Gated:
			v.errorf("channelEdges[%d]: channel %q gates itself", i, e.Gates)
		default:
			graph = append(graph, [2]string{e.Gates, e.Gated})
		}
	}
	if cycle := findCycle(graph); cycle != nil {
		v.errorf("channelEdges form a cycle: %s", strings.Join(cycle, " -> "))
	}
}

func (v *validator) budgets() {
	v.budgetNames()
	for i, b := range v.f.DisruptionBudgets {
		where := fmt.Sprintf("disruptionBudgets[%d]", i)
		if b.Selector.UsesCombinators() {
			v.selector(where, b.Selector)
			continue
		}
		n := b.Selector.Count(v.f.Hosts)
		if n == 0 {
			v.warnf("%s: selector matches no host", where)
		}
		limit, ok := n, true
		if b.MaxInFlight != nil {
			if m := *b.MaxInFlight; m <= 0 {
				v.errorf("%s: maxInFlight %d can never admit a host", where, m)
				ok = false
			} else {
				limit = min(limit, m)
			}
		}
		if b.MaxInFlightPct != nil {
			switch p := *b.MaxInFlightPct; {
			case p <= 0 || p > 100:
				v.errorf("%s: maxInFlightPct %d must be between 1 and 100", where, p)
				ok = false
			case n > 0 && n*p/100 == 0:
				v.errorf("%s: maxInFlightPct %d of %d hosts rounds down to 0 and can never admit a host", where, p, n)
				ok = false
			default:
				limit = min(limit, n*p/100)
			}
		}
		if !ok {
			continue
		}
		if b.MaxInFlight == nil && b.MaxInFlightPct == nil {
			v.warnf("%s: sets neither maxInFlight nor maxInFlightPct, so it limits nothing", where)
		} else if limit == 1 && n >= TightBudgetHosts {
			v.warnf("%s: admits one host at a time across %d hosts; rollouts through it will be slow", where, n)
		}
	}
}

// label reports whether an optional name (of a budget or a wave) is
// absent or well-formed, and records the problem when it is not.
func (v *validator) label(where, name string) bool {
	if name == "" || labelRE.MatchString(name) {
		return true
	}
	v.errorf("%s: name %q must be letters, digits, '.', '_' or '-', at most %d long", where, name, MaxLabelLen)
	return false
}

// budgetNames checks that budgets can be told apart by their labels: a
// name is well-formed and no other budget is called the same. Unnamed
// budgets whose selectors differ but whose short forms coincide (long
// lists are cut) only draw a warning.
func (v *validator) budgetNames() {
	first := map[string]int{}
	for i, b := range v.f.DisruptionBudgets {
		where := fmt.Sprintf("disruptionBudgets[%d]", i)
		if !v.label(where, b.Name) {
			continue
		}
		label := b.Label()
		j, seen := first[label]
		if !seen {
			first[label] = i
			continue
		}
		o := v.f.DisruptionBudgets[j]
		switch {
		case b.Name != "" || o.Name != "":
			v.errorf("%s: is called %q, like disruptionBudgets[%d]; budget names must be unique", where, label, j)
		case !b.Selector.Equal(o.Selector):
			v.warnf("%s: is called %q, like disruptionBudgets[%d]; give them names", where, label, j)
		}
	}
}

// findCycle returns one cycle of the directed graph (as a closed path), or
// nil. Nodes are visited in sorted order so the answer is deterministic.
func findCycle(edges [][2]string) []string {
	adj := map[string][]string{}
	for _, e := range edges {
		adj[e[0]] = append(adj[e[0]], e[1])
	}
	for _, next := range adj {
		slices.Sort(next)
	}
	const (
		unvisited = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, m := range adj[n] {
			switch state[m] {
			case onPath:
				start := slices.Index(path, m)
				return append(slices.Clone(path[start:]), m)
			case unvisited:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, n := range sortedKeys(adj) {
		if state[n] == unvisited {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
