package trust

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/proto"
)

// ClockSkew is the tolerance applied to both freshness bounds.
const ClockSkew = 60 * time.Second

// MaxWindowMinutes bounds a freshness window (366 days); a longer one is
// malformed rather than an effectively disabled check.
const MaxWindowMinutes = 366 * 24 * 60

// Policy says what Verify checks beyond the signature.
type Policy struct {
	// Kind is the artifact kind expected; empty means detect it from the
	// document's members.
	Kind proto.Kind
	// FreshnessWindow, when positive, replaces the window the artifact
	// carries: each channel's freshnessWindow for a fleet.resolved (all must
	// hold, so the shortest decides), the manifest's own for a manifest.
	FreshnessWindow time.Duration
}

// Result is what a verified artifact yields. Its fields are decoded from the
// canonical bytes that the signature covers.
type Result struct {
	Kind proto.Kind
	// Canonical is the JCS form of the artifact: the signed bytes.
	Canonical []byte
	// SHA256 is the lowercase hex SHA-256 of Canonical: the fleetResolvedHash
	// of a fleet.resolved, the content hash of a manifest.
	SHA256 string
	// SignedAt is meta.signedAt.
	SignedAt time.Time
	// Slot and Algorithm identify the trusted key that verified it.
	Slot      string
	Algorithm string
	// Window is the freshness window that was applied.
	Window time.Duration

	// Fleet is set for a fleet.resolved, Manifest for a rollout manifest.
	Fleet    *proto.FleetResolved
	Manifest *proto.RolloutManifest
}

// RejectedError is returned when an artifact whose signature verified is
// refused by a later check (steps 7–9, and the manifest checks). It carries
// what the signed artifact states, for diagnostics; the artifact must still
// not be used. errors.Is sees through it to the sentinel.
type RejectedError struct {
	Err      error
	Kind     proto.Kind
	SignedAt time.Time
}

func (e *RejectedError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *RejectedError) Unwrap() error { return e.Err }

// Reject wraps err, about the verified artifact res, in a *RejectedError.
func Reject(res *Result, err error) error {
	return &RejectedError{Err: err, Kind: res.Kind, SignedAt: res.SignedAt}
}

// Verify checks a signed artifact as received (artifact bytes and the raw
// signature) against roots at time now. The checks run in this order; the
// first failure is returned, wrapping its sentinel:
//
//  1. ErrNoTrustRoots: no key is active at now.
//  2. ErrMalformed: the bytes cannot be canonicalized, or are not a
//     well-formed artifact of the kind (shape checks are skipped when the
//     schemaVersion is not 1, which step 5 reports instead).
//  3. ErrBadSignature: no active key of a supported algorithm verifies the
//     signature over the canonical bytes.
//  4. ErrUnsupportedAlgorithm: no active key has a supported algorithm.
//  5. ErrUnsupportedSchema: schemaVersion (or meta.schemaVersion) is not 1.
//  6. ErrNotSigned: meta.signedAt is absent or null.
//  7. ErrRejectedBefore: signedAt is before the roots' rejectBefore.
//  8. ErrStale: now - signedAt exceeds the freshness window + ClockSkew.
//  9. ErrFutureDated: signedAt - now exceeds ClockSkew.
//
// Steps 3 and 4 are one step: the signature is tried with every supported
// active key, and which of the two errors is returned depends on whether
// any key was supported. Manifest-specific checks follow in
// manifest.Verify.
func Verify(artifact, sig []byte, roots *Roots, policy Policy, now time.Time) (*Result, error) {
	// 1.
	var active []ActiveKey
	if roots != nil {
		active = roots.Active(now)
	}
	if len(active) == 0 {
		return nil, fmt.Errorf("%w: trust.json has no ciReleaseKey active at %s", ErrNoTrustRoots, now.UTC().Format(time.RFC3339))
	}

	// 2.
	kind := policy.Kind
	if kind == "" {
		if _, err := proto.CheckSyntax(artifact, ""); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		k, err := proto.DetectKind(artifact)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		kind = k
	}
	// A large artifact is, as CI writes it, canonical as received: it is
	// decoded and its signature checked as received, on other cores,
	// while the canonical check runs. Those verdicts are used only when
	// the canonical bytes are the bytes received; otherwise the work is
	// done again on the canonical bytes (and the guesses finish unread).
	var guess *guessed
	if len(artifact) >= parallelVerify {
		guess = startGuess(active, artifact, sig, kind)
	}
	canonical, err := canonicalize(artifact, kind)
	if err != nil {
		return nil, err
	}
	res := &Result{Kind: kind, Canonical: canonical}
	var meta *proto.Meta
	var schemaVersion int
	var schemaErr error
	var verdict func() sigVerdict
	if guess != nil && sameBytes(canonical, artifact) {
		d := <-guess.decoded
		res.Fleet, res.Manifest, meta, schemaVersion, schemaErr = d.res.Fleet, d.res.Manifest, d.meta, d.schemaVersion, d.err
		verdict = func() sigVerdict { return <-guess.sig }
	} else {
		// Steps 3 and 4 need only the canonical bytes: for a large
		// artifact they run on another core while it decodes, and their
		// verdict is read after step 2's, so the errors keep their order.
		verdict = func() sigVerdict { return checkSignature(active, canonical, sig) }
		if len(canonical) >= parallelVerify {
			ch := make(chan sigVerdict, 1) // a malformed artifact returns without reading it
			go func() { ch <- checkSignature(active, canonical, sig) }()
			verdict = func() sigVerdict { return <-ch }
		}
		schemaErr = decodeArtifact(res, &meta, &schemaVersion)
	}
	if schemaErr != nil {
		if v, ok := proto.PeekSchemaVersion(canonical); !ok || v == proto.SchemaVersion {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, schemaErr)
		}
	}
	sv := verdict()

	// 3 and 4.
	if len(sig) != SignatureSize {
		return nil, fmt.Errorf("%w: signature is %d bytes, want %d raw bytes", ErrBadSignature, len(sig), SignatureSize)
	}
	if sv.slot == "" {
		if len(sv.tried) == 0 {
			return nil, fmt.Errorf("%w: active keys: %s", ErrUnsupportedAlgorithm, strings.Join(sv.unsupported, ", "))
		}
		return nil, fmt.Errorf("%w: no active key verifies the signature over the canonical bytes (tried %s)", ErrBadSignature, strings.Join(sv.tried, ", "))
	}
	res.Slot, res.Algorithm = sv.slot, sv.algorithm
	res.SHA256 = hex.EncodeToString(sv.sum[:])

	// 5.
	if schemaErr != nil || schemaVersion != proto.SchemaVersion {
		v, _ := proto.PeekSchemaVersion(canonical)
		return nil, fmt.Errorf("%w: schemaVersion %d, this build reads %d", ErrUnsupportedSchema, v, proto.SchemaVersion)
	}
	if meta.SchemaVersion != nil && *meta.SchemaVersion != proto.SchemaVersion {
		return nil, fmt.Errorf("%w: meta.schemaVersion %d, this build reads %d", ErrUnsupportedSchema, *meta.SchemaVersion, proto.SchemaVersion)
	}

	// 6.
	if meta.SignedAt == nil || *meta.SignedAt == "" {
		return nil, fmt.Errorf("%w: meta.signedAt is null; sign releases with `nixfleet release sign`", ErrNotSigned)
	}
	signedAt, err := time.Parse(time.RFC3339, *meta.SignedAt)
	if err != nil {
		return nil, fmt.Errorf("%w: meta.signedAt %q is not an RFC 3339 time", ErrMalformed, *meta.SignedAt)
	}
	res.SignedAt = signedAt

	if err := checkTimes(res, roots, policy, now); err != nil {
		return nil, err
	}
	return res, nil
}

// checkTimes runs Verify's steps 7–9 on a verified artifact, and sets
// res.Window to the freshness window it applied.
func checkTimes(res *Result, roots *Roots, policy Policy, now time.Time) error {
	signedAt := res.SignedAt
	// 7.
	if rb, ok := roots.RejectBefore(); ok && signedAt.Before(rb) {
		return Reject(res, fmt.Errorf("%w: signed %s, trust roots reject anything signed before %s",
			ErrRejectedBefore, stamp(signedAt), stamp(rb)))
	}

	// 8.
	window, source := policy.FreshnessWindow, "the requested window"
	if window <= 0 {
		var err error
		if window, source, err = artifactWindow(res); err != nil {
			return Reject(res, err)
		}
	}
	res.Window = window
	if age := now.Sub(signedAt); age > window+ClockSkew {
		return Reject(res, fmt.Errorf("%w: signed %s, %s before %s; %s is %s plus %s of clock skew",
			ErrStale, stamp(signedAt), span(age), stamp(now), source, span(window), span(ClockSkew)))
	}

	// 9.
	if ahead := signedAt.Sub(now); ahead > ClockSkew {
		return Reject(res, fmt.Errorf("%w: signed %s, %s after %s; at most %s of clock skew is tolerated",
			ErrFutureDated, stamp(signedAt), span(ahead), stamp(now), span(ClockSkew)))
	}
	return nil
}

// Recheck judges at now an artifact that Verify accepted at an earlier
// time, with the same roots and policy: res is what Verify returned and
// sig the signature it checked. Only the steps that depend on the time
// run again: some key is active at now (1), one of them verifies the
// signature (3 and 4: the key that verified it, in the first slot that
// holds it, when still active; else the others over res.Canonical), and
// rejectBefore and freshness (7–9).
// The bytes are not canonicalized, decoded nor hashed again, so it costs
// microseconds where Verify costs a pass over the artifact, and its
// verdict and error are the ones Verify would return at now. res must
// not have been changed since (res.Window is set again); the caller
// keeps it with the bytes it came from.
func Recheck(res *Result, sig []byte, roots *Roots, policy Policy, now time.Time) error {
	// 1.
	var active []ActiveKey
	if roots != nil {
		active = roots.Active(now)
	}
	if len(active) == 0 {
		return fmt.Errorf("%w: trust.json has no ciReleaseKey active at %s", ErrNoTrustRoots, now.UTC().Format(time.RFC3339))
	}
	// 3 and 4: the first active key that is the one that verified it
	// (another key is taken not to verify a signature this one does).
	signer := roots.keyOf(res.Slot)
	i := slices.IndexFunc(active, func(k ActiveKey) bool { return signer != nil && k.Key.same(signer) })
	if i < 0 {
		sv := checkSignature(active, res.Canonical, sig)
		if sv.slot == "" {
			if len(sv.tried) == 0 {
				return fmt.Errorf("%w: active keys: %s", ErrUnsupportedAlgorithm, strings.Join(sv.unsupported, ", "))
			}
			return fmt.Errorf("%w: no active key verifies the signature over the canonical bytes (tried %s)", ErrBadSignature, strings.Join(sv.tried, ", "))
		}
		res.Slot, res.Algorithm = sv.slot, sv.algorithm
	} else {
		res.Slot, res.Algorithm = active[i].Slot, active[i].Algorithm
	}
	return checkTimes(res, roots, policy, now)
}

// parallelVerify is the size of canonical bytes from which Verify checks
// the signature beside the decode: below it a goroutine costs more than
// it saves.
const parallelVerify = 64 << 10

// guessed is the decode and signature verdict of an artifact as
// received, computed while it is checked to be canonical (Verify).
type guessed struct {
	decoded chan guessedDecode
	sig     chan sigVerdict
}

type guessedDecode struct {
	res           Result
	meta          *proto.Meta
	schemaVersion int
	err           error
}

// startGuess starts decoding artifact as kind, and checking sig over it, each
// on a goroutine; both channels are buffered, so that an unread verdict
// lets its goroutine end.
func startGuess(active []ActiveKey, artifact, sig []byte, kind proto.Kind) *guessed {
	g := &guessed{decoded: make(chan guessedDecode, 1), sig: make(chan sigVerdict, 1)}
	go func() { g.sig <- checkSignature(active, artifact, sig) }()
	go func() {
		d := guessedDecode{res: Result{Kind: kind, Canonical: artifact}}
		d.err = decodeArtifact(&d.res, &d.meta, &d.schemaVersion)
		g.decoded <- d
	}()
	return g
}

// sameBytes reports whether a and b are the same bytes in memory (the
// canonical check returns what it was given when it is canonical).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// sigVerdict is what checking a signature with the active keys found:
// the key that verified it (slot empty when none did), the keys tried
// and those of an unsupported algorithm, and the SHA-256 of the signed
// bytes once verified.
type sigVerdict struct {
	slot, algorithm    string
	tried, unsupported []string
	sum                [sha256.Size]byte
}

// checkSignature tries sig over canonical with every active key of a
// supported algorithm (steps 3 and 4); a signature of the wrong size is
// tried with none.
func checkSignature(active []ActiveKey, canonical, sig []byte) sigVerdict {
	var v sigVerdict
	if len(sig) != SignatureSize {
		return v
	}
	for _, k := range active {
		if k.Key == nil {
			v.unsupported = append(v.unsupported, fmt.Sprintf("%s (%s)", k.Slot, k.Algorithm))
			continue
		}
		v.tried = append(v.tried, fmt.Sprintf("%s (%s)", k.Slot, k.Algorithm))
		if k.Key.Verify(canonical, sig) {
			v.slot, v.algorithm = k.Slot, k.Algorithm
			v.sum = sha256.Sum256(canonical)
			return v
		}
	}
	return v
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// span formats a duration for people: whole seconds, with days spelled out.
func span(d time.Duration) string {
	d = d.Round(time.Second)
	if day := 24 * time.Hour; d >= 2*day {
		return fmt.Sprintf("%dd%s", d/day, (d % day).String())
	}
	return d.String()
}

// decodeArtifact decodes the canonical bytes into the typed artifact and
// checks the shape rules that are not expressible in Go types.
func decodeArtifact(res *Result, meta **proto.Meta, schemaVersion *int) error {
	switch res.Kind {
	case proto.KindFleetResolved:
		var f proto.FleetResolved
		if err := proto.DecodeChecked(res.Canonical, &f); err != nil {
			return err
		}
		if f.Hosts == nil || f.Channels == nil {
			return fmt.Errorf("a fleet.resolved needs \"hosts\" and \"channels\" objects")
		}
		res.Fleet, *meta, *schemaVersion = &f, &f.Meta, f.SchemaVersion
	case proto.KindRolloutManifest:
		var m proto.RolloutManifest
		if err := proto.DecodeChecked(res.Canonical, &m); err != nil {
			return err
		}
		if err := checkManifestShape(&m); err != nil {
			return err
		}
		res.Manifest, *meta, *schemaVersion = &m, &m.Meta, m.SchemaVersion
	default:
		return fmt.Errorf("unknown artifact kind %q", res.Kind)
	}
	return nil
}

// checkManifestShape enforces the ordering rules of a manifest: they make
// its canonical bytes unique, and membership lookups rely on them.
func checkManifestShape(m *proto.RolloutManifest) error {
	if m.HostSet == nil {
		return fmt.Errorf("a rollout manifest needs a \"hostSet\" array")
	}
	for i := 1; i < len(m.HostSet); i++ {
		if m.HostSet[i-1].Hostname >= m.HostSet[i].Hostname {
			return fmt.Errorf("hostSet is not sorted by hostname with each host once (%q before %q)",
				m.HostSet[i-1].Hostname, m.HostSet[i].Hostname)
		}
	}
	for i, b := range m.DisruptionBudgets {
		if !slices.IsSorted(b.Hosts) || len(slices.Compact(slices.Clone(b.Hosts))) != len(b.Hosts) {
			return fmt.Errorf("disruptionBudgets[%d].hosts is not sorted with each host once", i)
		}
	}
	return nil
}

// artifactWindow returns the freshness window an artifact carries.
func artifactWindow(res *Result) (time.Duration, string, error) {
	if res.Manifest != nil {
		if w := res.Manifest.FreshnessWindow; w <= 0 || w > MaxWindowMinutes {
			return 0, "", fmt.Errorf("%w: manifest freshnessWindow %d is not between 1 and %d minutes", ErrMalformed, w, MaxWindowMinutes)
		}
		return minutes(res.Manifest.FreshnessWindow), "the manifest's freshness window", nil
	}
	names := make([]string, 0, len(res.Fleet.Channels))
	for name := range res.Fleet.Channels {
		names = append(names, name)
	}
	slices.Sort(names)
	best, bestName := 0, ""
	for _, name := range names {
		w := res.Fleet.Channels[name].FreshnessWindow
		if w <= 0 || w > MaxWindowMinutes {
			return 0, "", fmt.Errorf("%w: channel %q freshnessWindow %d is not between 1 and %d minutes", ErrMalformed, name, w, MaxWindowMinutes)
		}
		if bestName == "" || w < best {
			best, bestName = w, name
		}
	}
	if bestName == "" {
		return 0, "", fmt.Errorf("%w: the fleet declares no channel, so no freshness window applies; give one explicitly", ErrMalformed)
	}
	return minutes(best), fmt.Sprintf("channel %q's freshness window", bestName), nil
}

func minutes(n int) time.Duration { return time.Duration(n) * time.Minute }
