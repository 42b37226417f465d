package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// ---- times ----

// micros is how a time is stored: UTC microseconds since the Unix epoch.
// The zero time is stored as its own (negative) value and reads back as
// the zero time.
func micros(t time.Time) int64 { return t.UnixMicro() }

// fromMicros is the UTC time of a stored value.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// utcMicro is t as the store keeps it: UTC, truncated to the microsecond.
func utcMicro(t time.Time) time.Time { return fromMicros(micros(t)) }

// ---- JSON ----

func marshal(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("store: encode: %w", err)
	}
	return string(b), nil
}

func unmarshal(s string, v any) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("store: decode stored JSON: %w", err)
	}
	return nil
}

// reasonJSON encodes a Reason; the empty one, the most common, without
// reflection.
func reasonJSON(r reconciler.Reason) (string, error) {
	if r == (reconciler.Reason{}) {
		return "{}", nil
	}
	return marshal(r)
}

// reasonDecoder decodes Reason JSON, once per distinct text: the hosts of
// a wave mostly share their reasons.
type reasonDecoder map[string]reconciler.Reason

func (d reasonDecoder) decode(s string) (reconciler.Reason, error) {
	if s == "{}" {
		return reconciler.Reason{}, nil
	}
	if r, ok := d[s]; ok {
		return r, nil
	}
	var r reconciler.Reason
	if err := unmarshal(s, &r); err != nil {
		return r, err
	}
	d[s] = r
	return r, nil
}

// budgetsJSON encodes a host's budget indexes: "null" for nil, so that
// nil and empty read back as they were written.
func budgetsJSON(b []int) string {
	if b == nil {
		return "null"
	}
	buf := make([]byte, 0, 2+4*len(b))
	buf = append(buf, '[')
	for i, x := range b {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(x), 10)
	}
	return string(append(buf, ']'))
}

func decodeBudgets(s string) ([]int, error) {
	if s == "null" {
		return nil, nil
	}
	var b []int
	err := unmarshal(s, &b)
	return b, err
}

// eventBudgetsJSON encodes an event's budget occupancy: "null" when the
// event notes none, the most common case, without reflection.
func eventBudgetsJSON(us []reconciler.BudgetUse) (string, error) {
	if len(us) == 0 {
		return "null", nil
	}
	return marshal(us)
}

// decodeEventBudgets reads what eventBudgetsJSON wrote.
func decodeEventBudgets(s string) ([]proto.BudgetUse, error) {
	if s == "null" || s == "" {
		return nil, nil
	}
	var us []proto.BudgetUse
	return us, unmarshal(s, &us)
}

// bytesOrEmpty keeps nil out of NOT NULL byte columns: both drivers write
// a nil slice as NULL.
func bytesOrEmpty(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// ---- rollouts ----

// frozen is what a rollout froze at open, stored as one JSON column.
type frozen struct {
	Waves           []reconciler.WaveSpec       `json:"waves"`
	HealthGate      proto.HealthGate            `json:"healthGate"`
	OnHealthFailure string                      `json:"onHealthFailure"`
	ComplianceMode  string                      `json:"complianceMode"`
	Frameworks      []string                    `json:"complianceFrameworks"`
	Edges           []reconciler.Edge           `json:"edges"`
	Budgets         []proto.RolloutBudget       `json:"budgets"`
	Windows         []proto.Window              `json:"windows,omitempty"`
	HostWindows     []reconciler.HostWindowSpec `json:"hostWindows,omitempty"`
	// Approvals and FreezeBreak are not frozen: they grow after the
	// open, and are rewritten with the rest on every change.
	Approvals   []reconciler.Approval   `json:"approvals,omitempty"`
	FreezeBreak *reconciler.FreezeBreak `json:"freezeBreak,omitempty"`
	// Analyses, the runs of the waves' canary analyses, change as
	// measurements are counted (rfcs/0003 rule 16).
	Analyses []reconciler.AnalysisRun `json:"analyses,omitempty"`
	// Reboot is the policy's reboot step (rule 17).
	Reboot *proto.Reboot `json:"reboot,omitempty"`
}

func frozenOf(r *reconciler.Rollout) frozen {
	return frozen{Waves: r.Waves, HealthGate: r.HealthGate, OnHealthFailure: r.OnHealthFailure,
		ComplianceMode: r.ComplianceMode, Frameworks: r.Frameworks, Edges: r.Edges, Budgets: r.Budgets,
		Windows: r.Windows, HostWindows: r.HostWindows, Approvals: r.Approvals, FreezeBreak: r.FreezeBreak, Analyses: r.Analyses,
		Reboot: r.Reboot}
}

func (f frozen) into(r *reconciler.Rollout) {
	r.Waves, r.HealthGate, r.OnHealthFailure = f.Waves, f.HealthGate, f.OnHealthFailure
	r.ComplianceMode, r.Frameworks, r.Edges, r.Budgets = f.ComplianceMode, f.Frameworks, f.Edges, f.Budgets
	r.Windows, r.HostWindows, r.Approvals, r.FreezeBreak = f.Windows, f.HostWindows, f.Approvals, f.FreezeBreak
	r.Analyses, r.Reboot = f.Analyses, f.Reboot
}

// rebootColumn is the reboot column of a rollout (migration 0021): its
// reboot step and the waves it applies to, so that a host's assignment
// says what its agent is told without reading the frozen plan.
type rebootColumn struct {
	BootTimeoutMinutes int   `json:"bootTimeoutMinutes"`
	Kexec              bool  `json:"kexec,omitempty"`
	Waves              []int `json:"waves"`
}

// rebootText is a rollout's reboot column: "" when it orders no reboot.
func rebootText(r *reconciler.Rollout) (string, error) {
	if r.Reboot == nil {
		return "", nil
	}
	c := rebootColumn{BootTimeoutMinutes: r.Reboot.BootTimeoutMinutes, Kexec: r.Reboot.Kexec, Waves: []int{}}
	for i, w := range r.Waves {
		if w.Reboot {
			c.Waves = append(c.Waves, i)
		}
	}
	b, err := marshal(c)
	return string(b), err
}

// parseReboot reads a reboot column (rebootText) into each wave's step.
func parseReboot(s string, waves int) ([]reconciler.RebootSpec, error) {
	if s == "" {
		return nil, nil
	}
	var c rebootColumn
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return nil, fmt.Errorf("store: reboot %q: %w", s, err)
	}
	out := make([]reconciler.RebootSpec, waves)
	for _, i := range c.Waves {
		if i >= 0 && i < waves {
			out[i] = reconciler.RebootSpec{Managed: true, Timeout: time.Duration(c.BootTimeoutMinutes) * time.Minute, Kexec: c.Kexec}
		}
	}
	return out, nil
}

// waveSoaksText is the wave_soaks column of a rollout: each wave's soak in
// minutes, in wave order, comma separated (migration 0016).
func waveSoaksText(ws []reconciler.WaveSpec) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = strconv.Itoa(w.SoakMinutes)
	}
	return strings.Join(parts, ",")
}

// parseWaveSoaks reads a wave_soaks column (waveSoaksText).
func parseWaveSoaks(s string) ([]time.Duration, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	out := make([]time.Duration, len(parts))
	for i, p := range parts {
		m, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("store: wave_soaks %q: %w", s, err)
		}
		out[i] = time.Duration(m) * time.Minute
	}
	return out, nil
}

// rolloutCols are the columns of a rollout header, in rolloutArgs order.
const rolloutCols = "id, channel, ref, state, wave, wave_phase, opened_at, wave_started_at, updated_at, progress_at, reason, manifest_hash, failures_forgiven, frozen"

func rolloutArgs(r *reconciler.Rollout) ([]any, error) {
	reason, err := reasonJSON(r.Reason)
	if err != nil {
		return nil, err
	}
	fz, err := marshal(frozenOf(r))
	if err != nil {
		return nil, err
	}
	return []any{r.ID, r.Channel, r.Ref, string(r.State), r.Wave, string(r.WavePhase), micros(r.OpenedAt),
		micros(r.WaveStartedAt), micros(r.UpdatedAt), micros(r.ProgressAt), reason, r.ManifestHash,
		r.FailuresForgiven, fz}, nil
}

// scanRollout reads one header row (rolloutCols) into a Rollout without
// its frozen parts, and returns the frozen JSON.
func scanRollout(rs row) (reconciler.Rollout, string, error) {
	var (
		r                                   reconciler.Rollout
		reason, fz                          string
		opened, waveStarted, updated, progr int64
	)
	err := rs.Scan(&r.ID, &r.Channel, &r.Ref, (*string)(&r.State), &r.Wave, (*string)(&r.WavePhase),
		&opened, &waveStarted, &updated, &progr, &reason, &r.ManifestHash, &r.FailuresForgiven, &fz)
	if err != nil {
		return r, "", err
	}
	r.OpenedAt, r.WaveStartedAt, r.UpdatedAt, r.ProgressAt = fromMicros(opened), fromMicros(waveStarted), fromMicros(updated), fromMicros(progr)
	if err := unmarshal(reason, &r.Reason); err != nil {
		return r, "", err
	}
	return r, fz, nil
}

// hostCols are the columns of a rollout host, in hostValues order.
const hostCols = "rollout_id, hostname, wave, target, state, since, previous, reason, blocked, budgets"

var hostColumns = strings.Split(hostCols, ", ")

const hostColCount = 10

// encoder encodes the JSON columns of one write, once per distinct value:
// the hosts of a wave and the events of a tick mostly share reasons.
type encoder struct {
	reasons map[reconciler.Reason]string
}

func newEncoder() *encoder { return &encoder{reasons: map[reconciler.Reason]string{}} }

func (e *encoder) reason(r reconciler.Reason) (string, error) {
	if s, ok := e.reasons[r]; ok {
		return s, nil
	}
	s, err := reasonJSON(r)
	if err != nil {
		return "", err
	}
	e.reasons[r] = s
	return s, nil
}

// hostValues returns a rollout host's column values (hostCols).
func (e *encoder) hostValues(rolloutID string, h *reconciler.RolloutHost) ([]any, error) {
	reason, err := e.reason(h.Reason)
	if err != nil {
		return nil, err
	}
	blocked, err := e.reason(h.Blocked)
	if err != nil {
		return nil, err
	}
	return []any{rolloutID, h.Hostname, h.Wave, h.Target, string(h.State), micros(h.Since), h.Previous,
		reason, blocked, budgetsJSON(h.Budgets)}, nil
}

// hostScanner reads rollout host rows (hostCols), sharing decoded reasons.
type hostScanner struct {
	reasons reasonDecoder
	budgets map[string][]int
}

func newHostScanner() *hostScanner {
	return &hostScanner{reasons: reasonDecoder{}, budgets: map[string][]int{}}
}

func (s *hostScanner) scan(rs row) (string, reconciler.RolloutHost, error) {
	var (
		rid                     string
		h                       reconciler.RolloutHost
		since                   int64
		reason, blocked, budget string
	)
	if err := rs.Scan(&rid, &h.Hostname, &h.Wave, &h.Target, (*string)(&h.State), &since, &h.Previous,
		&reason, &blocked, &budget); err != nil {
		return "", h, err
	}
	h.Since = fromMicros(since)
	var err error
	if h.Reason, err = s.reasons.decode(reason); err != nil {
		return "", h, err
	}
	if h.Blocked, err = s.reasons.decode(blocked); err != nil {
		return "", h, err
	}
	b, ok := s.budgets[budget]
	if !ok {
		if b, err = decodeBudgets(budget); err != nil {
			return "", h, err
		}
		s.budgets[budget] = b
	}
	// Hosts share the decoded slice: copy it so that no two hosts alias.
	if b != nil {
		h.Budgets = append(make([]int, 0, len(b)), b...)
	}
	return rid, h, nil
}

// ---- statuses ----

// normalizeStatus returns st as stored: times in UTC to the microsecond,
// empty lists as nil (an agent sending [] or null says the same).
func normalizeStatus(st HostStatus) HostStatus {
	nilIfEmpty := func(l []string) []string {
		if len(l) == 0 {
			return nil
		}
		return l
	}
	st.FailedUnits = nilIfEmpty(st.FailedUnits)
	st.Probes.Failed = nilIfEmpty(st.Probes.Failed)
	if len(st.Compliance) == 0 {
		st.Compliance = nil
	}
	if st.Activation != nil {
		a := *st.Activation
		a.At = utcMicro(a.At)
		st.Activation = &a
	}
	if len(st.Quarantine) == 0 {
		st.Quarantine = nil
	} else {
		q := make([]reconciler.Quarantine, len(st.Quarantine))
		for i, x := range st.Quarantine {
			q[i] = reconciler.Quarantine{Closure: x.Closure, Until: utcMicro(x.Until)}
		}
		st.Quarantine = q
	}
	return st
}

// encodeStatus returns a normalized status's JSON and its digest.
func encodeStatus(st HostStatus) (body, digest string, err error) {
	body, err = marshal(normalizeStatus(st))
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256([]byte(body))
	return body, hex.EncodeToString(sum[:]), nil
}

// StatusDigest fingerprints what a host reports of itself: its status,
// normalized as stored, without the activation (which confirms and reports
// carry, not check-ins). Equal digests mean the same stored status.
func StatusDigest(st HostStatus) string {
	st.Activation = nil
	_, digest, err := encodeStatus(st)
	if err != nil {
		return "" // a status always encodes; "" matches no stored digest
	}
	return digest
}

// seenTimes sets a host's LastSeen and StatusAt from its host_seen row: a
// said_at of 0 (no check-in carried the stored status) is the Unix epoch,
// long before any verdict's moment, never the zero time (which the
// reconciler reads as LastSeen).
func seenTimes(o *reconciler.ObservedHost, lastSeen, saidAt int64) {
	o.LastSeen, o.StatusAt = fromMicros(lastSeen), fromMicros(saidAt)
}

func decodeStatus(body string) (HostStatus, error) {
	var st HostStatus
	err := unmarshal(body, &st)
	return st, err
}

// observed is the reconciler's view of a status and of the check-ins
// recorded: seen's LastSeen and StatusAt (seenTimes).
func observed(st HostStatus, seen reconciler.ObservedHost) reconciler.ObservedHost {
	return reconciler.ObservedHost{LastSeen: seen.LastSeen, StatusAt: seen.StatusAt, Current: st.Current, Booted: st.Booted, Probes: st.Probes,
		FailedUnits: st.FailedUnits, Compliance: st.Compliance, Deferred: st.Deferred, Activation: st.Activation,
		Quarantine: st.Quarantine, Prefetched: st.Prefetched}
}

// ---- the cache ----

// cache keeps what is costly to decode between ticks, keyed so that a
// stale entry is never used: artifacts by content hash, statuses by
// digest, frozen rollout parts by their exact JSON. Values handed to decide
// are shared with later ticks and must not be modified.
type cache struct {
	mu        sync.Mutex
	fleets    map[string]*proto.FleetResolved
	manifests map[string]*proto.RolloutManifest
	statuses  map[string]cachedStatus // by hostname
	frozen    map[string]cachedFrozen // by rollout id
}

type cachedStatus struct {
	digest string
	st     HostStatus
}

type cachedFrozen struct {
	text string
	f    frozen
}

func newCache() *cache {
	return &cache{fleets: map[string]*proto.FleetResolved{}, manifests: map[string]*proto.RolloutManifest{},
		statuses: map[string]cachedStatus{}, frozen: map[string]cachedFrozen{}}
}

// seed keeps the decoded artifacts of the releases stored without error
// (Release.Fleet, Release.Manifest) for the tick that loads them next;
// that tick's loadChannels keeps only what the channels then hold.
func (c *cache) seed(rs []Release, errs []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range rs {
		if errs[i] != nil {
			continue
		}
		if r.Fleet != nil {
			c.fleets[r.FleetHash] = r.Fleet
		}
		if r.Manifest != nil {
			c.manifests[r.ManifestHash] = r.Manifest
		}
	}
}

// frozenOf decodes a rollout's frozen JSON, or returns the cached value
// for the same text.
func (c *cache) frozenOf(id, text string) (frozen, error) {
	c.mu.Lock()
	e, ok := c.frozen[id]
	c.mu.Unlock()
	if ok && e.text == text {
		return e.f, nil
	}
	var f frozen
	if err := unmarshal(text, &f); err != nil {
		return f, fmt.Errorf("store: rollout %s: %w", id, err)
	}
	c.mu.Lock()
	c.frozen[id] = cachedFrozen{text: text, f: f}
	c.mu.Unlock()
	return f, nil
}

// keepFrozen drops the frozen parts of rollouts not in ids.
func (c *cache) keepFrozen(ids map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.frozen {
		if !ids[id] {
			delete(c.frozen, id)
		}
	}
}

// inList returns "'a', 'b'": SQL string literals of known constant names.
func inList[S ~string](names []S) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + string(n) + "'"
	}
	return strings.Join(q, ", ")
}

// Constant state lists, from the reconciler's state machines.
var (
	// inFlightStates: host states that count against budgets.
	inFlightStates = inList(filter(reconciler.HostStates, reconciler.HostState.InFlight))
	// terminalStates: rollout states that are over.
	terminalStates = inList(filter(reconciler.RolloutStates, reconciler.RolloutState.Terminal))
)

func filter[T any](l []T, keep func(T) bool) []T {
	var out []T
	for _, x := range l {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}
