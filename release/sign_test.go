package release_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestSignProducesVerifiableRelease(t *testing.T) {
	t.Parallel()
	for _, alg := range algorithms {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			key := generateKey(t, alg)
			b, err := release.Sign(readFleet(t), release.Options{Signer: key, Commit: testCommit, Now: testNow})
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}

			wantIDs := []string{"edge@" + testCommit, "stable@" + testCommit}
			if diff := cmp.Diff(wantIDs, b.RolloutIDs); diff != "" {
				t.Errorf("RolloutIDs (-want +got):\n%s", diff)
			}
			var paths []string
			for _, a := range b.Artifacts() {
				paths = append(paths, a.Path)
			}
			wantPaths := []string{
				"fleet.resolved.json",
				"rollouts/edge@" + testCommit + ".json",
				"rollouts/stable@" + testCommit + ".json",
			}
			if diff := cmp.Diff(wantPaths, paths); diff != "" {
				t.Errorf("artifact paths (-want +got):\n%s", diff)
			}
			if len(b.Warnings) != 0 {
				t.Errorf("Warnings = %q, want none for the sample fleet", b.Warnings)
			}

			for _, a := range b.Artifacts() {
				c, err := trust.Canonicalize(a.Body)
				if err != nil {
					t.Fatalf("%s: Canonicalize: %v", a.Path, err)
				}
				if !bytes.Equal(c, a.Body) {
					t.Errorf("%s: Body is not canonical:\n got %s\nwant %s", a.Path, a.Body, c)
				}
				if len(a.Sig) != trust.SignatureSize {
					t.Errorf("%s: signature is %d bytes, want %d", a.Path, len(a.Sig), trust.SignatureSize)
				}
				if !key.Public().Verify(a.Body, a.Sig) {
					t.Errorf("%s: signature does not verify with the signing key", a.Path)
				}
			}

			if got, want := b.FleetResolvedHash, sha256Hex(b.Fleet.Body); got != want {
				t.Errorf("FleetResolvedHash = %s, want sha256(Fleet.Body) = %s", got, want)
			}
			wantMeta := proto.Meta{
				SchemaVersion:      ptr(proto.SchemaVersion),
				SignedAt:           ptr(wantSignedAt),
				CICommit:           ptr(testCommit),
				SignatureAlgorithm: alg,
			}

			roots := rootsFor(t, key.Public())
			res, err := trust.Verify(b.Fleet.Body, b.Fleet.Sig, roots, trust.Policy{Kind: proto.KindFleetResolved}, testNow)
			if err != nil {
				t.Fatalf("trust.Verify(fleet): %v", err)
			}
			if res.SHA256 != b.FleetResolvedHash {
				t.Errorf("verified fleet hash %s, bundle says %s", res.SHA256, b.FleetResolvedHash)
			}
			if diff := cmp.Diff(wantMeta, res.Fleet.Meta); diff != "" {
				t.Errorf("fleet meta (-want +got):\n%s", diff)
			}
			if want := time.Date(2025, time.March, 4, 4, 6, 7, 0, time.UTC); !res.SignedAt.Equal(want) {
				t.Errorf("SignedAt = %s, want %s", res.SignedAt, want)
			}

			wantHosts := map[string][]proto.HostWave{
				"edge": {
					{Hostname: "edge-01", WaveIndex: 0, TargetClosure: "rr6yr3c4dwa7m36096p14dq9hnpy77zx-nixos-system-edge-01-24.11"},
					{Hostname: "edge-02", WaveIndex: 0, TargetClosure: "yyk596mhya1dp91k5hpanfmfcgrfczn1-nixos-system-edge-02-24.11"},
				},
				"stable": {
					{Hostname: "canary-01", WaveIndex: 0, TargetClosure: "l9r346p3d25vs4g5v37f3r3f28js97kb-nixos-system-canary-01-24.11"},
					{Hostname: "db-01", WaveIndex: 2, TargetClosure: "awri8visnqf95b9ff0zbhj09spl83xrr-nixos-system-db-01-24.11"},
					{Hostname: "web-01", WaveIndex: 1, TargetClosure: "6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-web-01-24.11"},
					{Hostname: "web-02", WaveIndex: 1, TargetClosure: "4lmnzx45iy43kwjqn1xna7z3dj8grrz5-nixos-system-web-02-24.11"},
				},
			}
			for i, a := range b.Rollouts {
				exp := manifest.Expect{RolloutID: wantIDs[i], ContentHash: sha256Hex(a.Body)}
				res, err := manifest.Verify(a.Body, a.Sig, roots, exp, testNow)
				if err != nil {
					t.Fatalf("manifest.Verify(%s): %v", a.Path, err)
				}
				m := res.Manifest
				if m.FleetResolvedHash != b.FleetResolvedHash {
					t.Errorf("%s: fleetResolvedHash %s, want %s", a.Path, m.FleetResolvedHash, b.FleetResolvedHash)
				}
				if m.ChannelRef != testCommit {
					t.Errorf("%s: channelRef %q, want %q", a.Path, m.ChannelRef, testCommit)
				}
				if diff := cmp.Diff(wantMeta, m.Meta); diff != "" {
					t.Errorf("%s: meta (-want +got):\n%s", a.Path, diff)
				}
				if diff := cmp.Diff(wantHosts[m.Channel], m.HostSet); diff != "" {
					t.Errorf("%s: hostSet of channel %q (-want +got):\n%s", a.Path, m.Channel, diff)
				}
			}
		})
	}
}

// TestSignKeepsUnknownMembers: stamping rewrites meta only; members this
// build does not know stay in the signed bytes, in JCS form.
func TestSignKeepsUnknownMembers(t *testing.T) {
	t.Parallel()
	extra := func() map[string]any {
		return map[string]any{"n": json.Number("1.50"), "e": json.Number("1E2"), "s": "<&>"}
	}
	unsigned := editFleet(t, readFleet(t), func(doc map[string]any) {
		doc["x-extra"] = extra()
		member(t, doc, "hosts", "web-01")["x-extra"] = extra()
		member(t, doc, "channels", "edge")["x-extra"] = extra()
		member(t, doc, "meta")["x-extra"] = extra()
	})
	if !bytes.Contains(unsigned, []byte(`"n":1.50`)) {
		t.Fatalf("test input does not spell 1.50: %s", unsigned)
	}
	key := generateKey(t, proto.AlgorithmEd25519)
	b := signFleet(t, key, unsigned, testCommit)

	// Compared as values, the signed document is the input with meta
	// stamped; nothing else was added, dropped or changed.
	var want, got map[string]any
	if err := json.Unmarshal(unsigned, &want); err != nil {
		t.Fatal(err)
	}
	meta := want["meta"].(map[string]any)
	meta["signedAt"] = wantSignedAt
	meta["ciCommit"] = testCommit
	meta["signatureAlgorithm"] = proto.AlgorithmEd25519
	if err := json.Unmarshal(b.Fleet.Body, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("signed document (-want +got):\n%s", diff)
	}

	// As bytes, every copy is in JCS form: sorted members, 1.50 -> 1.5,
	// 1E2 -> 100, no HTML escaping.
	const jcs = `"x-extra":{"e":100,"n":1.5,"s":"<&>"}`
	if n := bytes.Count(b.Fleet.Body, []byte(jcs)); n != 4 {
		t.Errorf("found %s %d times in the signed body, want 4:\n%s", jcs, n, b.Fleet.Body)
	}
	if bytes.Contains(b.Fleet.Body, []byte("1.50")) {
		t.Errorf("signed body still spells 1.50:\n%s", b.Fleet.Body)
	}
	if err := checkSigned(t, key, b); err != nil {
		t.Error(err)
	}
}

// checkSigned verifies every artifact of b with key at testNow.
func checkSigned(t *testing.T, key *trust.PrivateKey, b *release.Bundle) error {
	t.Helper()
	roots := rootsFor(t, key.Public())
	if _, err := trust.Verify(b.Fleet.Body, b.Fleet.Sig, roots, trust.Policy{Kind: proto.KindFleetResolved}, testNow); err != nil {
		return err
	}
	for i, a := range b.Rollouts {
		if _, err := manifest.Verify(a.Body, a.Sig, roots, manifest.Expect{RolloutID: b.RolloutIDs[i]}, testNow); err != nil {
			return err
		}
	}
	return nil
}

func TestSignStampsMeta(t *testing.T) {
	t.Parallel()
	stamped := func(alg string) map[string]any {
		return map[string]any{
			"schemaVersion":      json.Number("1"),
			"signedAt":           wantSignedAt,
			"ciCommit":           testCommit,
			"signatureAlgorithm": alg,
		}
	}
	tests := []struct {
		name string
		alg  string
		edit func(t *testing.T, doc map[string]any)
		want map[string]any
	}{
		{
			name: "null members",
			alg:  proto.AlgorithmEd25519,
			edit: func(*testing.T, map[string]any) {},
			want: stamped(proto.AlgorithmEd25519),
		},
		{
			name: "meta absent",
			alg:  proto.AlgorithmEd25519,
			edit: func(_ *testing.T, doc map[string]any) { delete(doc, "meta") },
			want: stamped(proto.AlgorithmEd25519),
		},
		{
			name: "meta null",
			alg:  proto.AlgorithmEd25519,
			edit: func(_ *testing.T, doc map[string]any) { doc["meta"] = nil },
			want: stamped(proto.AlgorithmEd25519),
		},
		{
			name: "meta empty",
			alg:  proto.AlgorithmECDSAP256,
			edit: func(_ *testing.T, doc map[string]any) { doc["meta"] = map[string]any{} },
			want: stamped(proto.AlgorithmECDSAP256),
		},
		{
			name: "schemaVersion null",
			alg:  proto.AlgorithmEd25519,
			edit: func(t *testing.T, doc map[string]any) { member(t, doc, "meta")["schemaVersion"] = nil },
			want: stamped(proto.AlgorithmEd25519),
		},
		{
			name: "already signed: re-stamped",
			alg:  proto.AlgorithmEd25519,
			edit: func(_ *testing.T, doc map[string]any) {
				doc["meta"] = map[string]any{
					"schemaVersion":      json.Number("1"),
					"signedAt":           "2020-01-01T00:00:00Z",
					"ciCommit":           "aaaaaaa",
					"signatureAlgorithm": proto.AlgorithmECDSAP256,
				}
			},
			want: stamped(proto.AlgorithmEd25519),
		},
		{
			name: "unknown meta member kept",
			alg:  proto.AlgorithmEd25519,
			edit: func(t *testing.T, doc map[string]any) { member(t, doc, "meta")["builder"] = "hydra" },
			want: func() map[string]any {
				m := stamped(proto.AlgorithmEd25519)
				m["builder"] = "hydra"
				return m
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := generateKey(t, tt.alg)
			unsigned := editFleet(t, readFleet(t), func(doc map[string]any) { tt.edit(t, doc) })
			b := signFleet(t, key, unsigned, testCommit)
			got := member(t, decodeJSON(t, b.Fleet.Body), "meta")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("meta (-want +got):\n%s", diff)
			}
			if err := checkSigned(t, key, b); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestSignRejectsMalformedInput(t *testing.T) {
	t.Parallel()
	fleet := string(readFleet(t))
	tests := []struct {
		name string
		in   string
	}{
		{name: "duplicate top-level member", in: strings.Replace(fleet, `"schemaVersion": 1,`, `"schemaVersion": 1, "schemaVersion": 1,`, 1)},
		{name: "duplicate host", in: strings.Replace(fleet, `"hosts": {`, `"hosts": { "web-01": {"channel": "stable"},`, 1)},
		{name: "duplicate meta member", in: strings.Replace(fleet, `"ciCommit": null`, `"ciCommit": null, "ciCommit": null`, 1)},
		{name: "not JSON", in: "not json"},
		{name: "empty", in: ""},
		{name: "truncated", in: fleet[:len(fleet)/2]},
		{name: "trailing data", in: fleet + "{}"},
		{name: "top-level array", in: "[" + fleet + "]"},
		{name: "meta is a number", in: strings.Replace(fleet, `"meta": {`, `"meta": 5, "x": {`, 1)},
		{name: "meta is an array", in: strings.Replace(fleet, `"meta": {`, `"meta": [], "x": {`, 1)},
		{name: "member differs only in case", in: strings.Replace(fleet, `"meta": {`, `"Meta": {`, 1)},
		{name: "invalid UTF-8", in: strings.Replace(fleet, `"strategy": "canary"`, "\"strategy\": \"can\xffary\"", 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.in == fleet {
				t.Fatal("test input was not modified")
			}
			signer := &countingSigner{Signer: generateKey(t, proto.AlgorithmEd25519)}
			b, err := release.Sign([]byte(tt.in), release.Options{Signer: signer, Commit: testCommit, Now: testNow})
			if !errors.Is(err, trust.ErrMalformed) {
				t.Fatalf("Sign error = %v, want one wrapping trust.ErrMalformed", err)
			}
			if b != nil {
				t.Errorf("Sign returned a bundle along with the error")
			}
			if signer.calls != 0 {
				t.Errorf("the signer was called %d times for malformed input", signer.calls)
			}
		})
	}
}

// countingSigner counts the messages it signs.
type countingSigner struct {
	trust.Signer
	calls int
}

func (s *countingSigner) Sign(msg []byte) ([]byte, error) {
	s.calls++
	return s.Signer.Sign(msg)
}

func TestSignRejectsInvalidFleet(t *testing.T) {
	t.Parallel()
	unsigned := editFleet(t, readFleet(t), func(doc map[string]any) {
		member(t, doc, "hosts", "web-01")["channel"] = "nope"
		member(t, doc, "hosts", "db-01")["closureHash"] = "not-a-store-path"
		member(t, doc, "channels", "edge")["freshnessWindow"] = json.Number("0")
		member(t, doc, "rolloutPolicies", "all-at-once")["onHealthFailure"] = "explode"
		doc["disruptionBudgets"] = append(doc["disruptionBudgets"].([]any),
			map[string]any{"selector": map[string]any{"all": true}, "maxInFlight": json.Number("0")})
	})
	want := []string{
		`host "db-01": closureHash "not-a-store-path" is not a Nix store path basename`,
		`host "web-01": channel "nope" does not exist`,
		`channel "edge": freshnessWindow 0 must be between 1 and 527040 minutes`,
		`rollout policy "all-at-once": onHealthFailure "explode" is not halt or rollback-and-halt`,
		`edges[0]: "web-01" (channel "nope") and "web-02" (channel "stable") are on different channels; use channelEdges to order channels`,
		`disruptionBudgets[2]: maxInFlight 0 can never admit a host`,
	}
	signer := &countingSigner{Signer: generateKey(t, proto.AlgorithmEd25519)}
	b, err := release.Sign(unsigned, release.Options{Signer: signer, Commit: testCommit, Now: testNow})
	if !errors.Is(err, manifest.ErrInvalidFleet) {
		t.Fatalf("Sign error = %v, want one wrapping manifest.ErrInvalidFleet", err)
	}
	if b != nil {
		t.Error("Sign returned a bundle along with the error")
	}
	var verr *manifest.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Sign error %T is not a *manifest.ValidationError", err)
	}
	if diff := cmp.Diff(want, verr.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	for _, p := range want {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error message does not mention %q:\n%s", p, err)
		}
	}
	if signer.calls != 0 {
		t.Errorf("the signer was called %d times for an invalid fleet", signer.calls)
	}
}

func TestSignWarnings(t *testing.T) {
	t.Parallel()
	unsigned := editFleet(t, readFleet(t), func(doc map[string]any) {
		member(t, doc, "hosts", "web-02")["closureHash"] = nil
	})
	key := generateKey(t, proto.AlgorithmEd25519)
	b := signFleet(t, key, unsigned, testCommit)
	want := []string{`host "web-02" has no closureHash; it is not part of any rollout`}
	if diff := cmp.Diff(want, b.Warnings); diff != "" {
		t.Errorf("Warnings (-want +got):\n%s", diff)
	}
	m, err := proto.DecodeRolloutManifest(b.Rollouts[1].Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range m.HostSet {
		if h.Hostname == "web-02" {
			t.Errorf("%s lists web-02, which has no closure", b.Rollouts[1].Path)
		}
	}
}

func TestSignCommit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		commit  string
		wantErr bool
	}{
		{name: "empty", commit: "", wantErr: true},
		{name: "branch name", commit: "main", wantErr: true},
		{name: "path traversal", commit: "../../../etc/passwd", wantErr: true},
		{name: "slash", commit: "abcdef0/abcdef0", wantErr: true},
		{name: "upper-case hex", commit: "ABCDEF0123", wantErr: true},
		{name: "too short", commit: "abcdef", wantErr: true},
		{name: "too long", commit: strings.Repeat("a", 65), wantErr: true},
		{name: "trailing newline", commit: testCommit + "\n", wantErr: true},
		{name: "short hash", commit: "abcdef0"},
		{name: "sha1", commit: testCommit},
		{name: "sha256", commit: strings.Repeat("0a", 32)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			signer := &countingSigner{Signer: generateKey(t, proto.AlgorithmEd25519)}
			b, err := release.Sign(readFleet(t), release.Options{Signer: signer, Commit: tt.commit, Now: testNow})
			if tt.wantErr {
				if !errors.Is(err, manifest.ErrInvalidFleet) {
					t.Fatalf("Sign error = %v, want one wrapping manifest.ErrInvalidFleet", err)
				}
				if !strings.Contains(err.Error(), "ciCommit") {
					t.Errorf("error does not name meta.ciCommit: %v", err)
				}
				if b != nil || signer.calls != 0 {
					t.Errorf("bundle %v returned, signer called %d times; want neither", b, signer.calls)
				}
				return
			}
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			want := []string{"edge@" + tt.commit, "stable@" + tt.commit}
			if diff := cmp.Diff(want, b.RolloutIDs); diff != "" {
				t.Errorf("RolloutIDs (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeSigner signs the n-th message (from 0) with sign.
type fakeSigner struct {
	alg   string
	sign  func(n int, msg []byte) ([]byte, error)
	calls int
}

func (f *fakeSigner) Algorithm() string { return f.alg }

func (f *fakeSigner) Sign(msg []byte) ([]byte, error) {
	n := f.calls
	f.calls++
	return f.sign(n, msg)
}

var errToken = errors.New("token not present")

func TestSignSigner(t *testing.T) {
	t.Parallel()
	ed := generateKey(t, proto.AlgorithmEd25519)
	ed2 := generateKey(t, proto.AlgorithmEd25519)
	ec := generateKey(t, proto.AlgorithmECDSAP256)

	// wrap hides a key behind the trust.Signer interface, so Sign cannot
	// take its public key from it; it may corrupt the n-th signature.
	wrap := func(k *trust.PrivateKey, corrupt func(n int, sig []byte) ([]byte, error)) *fakeSigner {
		return &fakeSigner{alg: k.Algorithm(), sign: func(n int, msg []byte) ([]byte, error) {
			sig, err := k.Sign(msg)
			if err != nil || corrupt == nil {
				return sig, err
			}
			return corrupt(n, sig)
		}}
	}
	fixed := func(sig []byte, err error) func(int, []byte) ([]byte, error) {
		return func(int, []byte) ([]byte, error) { return sig, err }
	}
	onCall := func(call int, f func(sig []byte) ([]byte, error)) func(int, []byte) ([]byte, error) {
		return func(n int, sig []byte) ([]byte, error) {
			if n == call {
				return f(sig)
			}
			return sig, nil
		}
	}
	flip := func(sig []byte) ([]byte, error) {
		sig = slices.Clone(sig)
		sig[10] ^= 1
		return sig, nil
	}

	tests := []struct {
		name   string
		signer trust.Signer
		pub    *trust.PublicKey
		// verifyWith, on success, must verify every signature.
		verifyWith *trust.PublicKey
		wantErr    error
		// wantCause, when set, must also be in the error chain.
		wantCause error
	}{
		{name: "local ed25519 key", signer: ed, verifyWith: ed.Public()},
		{name: "local ecdsa-p256 key", signer: ec, verifyWith: ec.Public()},
		{name: "local key with its public key", signer: ed, pub: ed.Public(), verifyWith: ed.Public()},
		{name: "opaque ed25519 signer with public key", signer: wrap(ed, nil), pub: ed.Public(), verifyWith: ed.Public()},
		{name: "opaque ecdsa-p256 signer with public key", signer: wrap(ec, nil), pub: ec.Public(), verifyWith: ec.Public()},
		{name: "opaque signer without public key", signer: wrap(ed, nil), verifyWith: ed.Public()},
		{
			// Documented: signatures are checked only when a key is known.
			name:   "opaque signer without public key is not checked",
			signer: &fakeSigner{alg: proto.AlgorithmEd25519, sign: fixed(make([]byte, 64), nil)},
		},

		{
			name:      "signer error",
			signer:    &fakeSigner{alg: proto.AlgorithmEd25519, sign: fixed(nil, errToken)},
			pub:       ed.Public(),
			wantErr:   release.ErrSigner,
			wantCause: errToken,
		},
		{
			name:      "signer error on a manifest",
			signer:    wrap(ed, onCall(2, func([]byte) ([]byte, error) { return nil, errToken })),
			pub:       ed.Public(),
			wantErr:   release.ErrSigner,
			wantCause: errToken,
		},
		{
			name:    "63 bytes",
			signer:  wrap(ed, func(_ int, sig []byte) ([]byte, error) { return sig[:63], nil }),
			pub:     ed.Public(),
			wantErr: release.ErrSigner,
		},
		{
			name:    "63 bytes without public key",
			signer:  &fakeSigner{alg: proto.AlgorithmEd25519, sign: fixed(make([]byte, 63), nil)},
			wantErr: release.ErrSigner,
		},
		{
			name:    "65 bytes",
			signer:  wrap(ed, func(_ int, sig []byte) ([]byte, error) { return append(sig, 0), nil }),
			pub:     ed.Public(),
			wantErr: release.ErrSigner,
		},
		{
			name:    "empty signature",
			signer:  &fakeSigner{alg: proto.AlgorithmEd25519, sign: fixed(nil, nil)},
			wantErr: release.ErrSigner,
		},
		{
			name:    "64 bytes that do not verify",
			signer:  &fakeSigner{alg: proto.AlgorithmEd25519, sign: fixed(make([]byte, 64), nil)},
			pub:     ed.Public(),
			wantErr: release.ErrSigner,
		},
		{
			name:    "a manifest signature that does not verify",
			signer:  wrap(ed, onCall(1, flip)),
			pub:     ed.Public(),
			wantErr: release.ErrSigner,
		},
		{
			name:    "another key's signatures",
			signer:  wrap(ed2, nil),
			pub:     ed.Public(),
			wantErr: release.ErrSigner,
		},
		{
			name:    "public key overrides the local key's own",
			signer:  ed2,
			pub:     ed.Public(),
			wantErr: release.ErrSigner,
		},
		{
			name:    "public key of another algorithm",
			signer:  ed,
			pub:     ec.Public(),
			wantErr: release.ErrSigner,
		},
		{
			// Refused before anything is signed: meta.signatureAlgorithm
			// would otherwise claim an algorithm the key does not have.
			name:    "signer claims another algorithm than its public key",
			signer:  &fakeSigner{alg: proto.AlgorithmECDSAP256, sign: fixed(nil, errToken)},
			pub:     ed.Public(),
			wantErr: release.ErrSigner,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := release.Sign(readFleet(t), release.Options{Signer: tt.signer, PublicKey: tt.pub, Commit: testCommit, Now: testNow})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Sign error = %v, want one wrapping %v", err, tt.wantErr)
				}
				if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
					t.Errorf("Sign error = %v, want it to wrap the signer's %v", err, tt.wantCause)
				}
				if b != nil {
					t.Error("Sign returned a bundle along with the error")
				}
				return
			}
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if got := len(b.Artifacts()); got != 3 {
				t.Fatalf("bundle has %d artifacts, want 3", got)
			}
			meta := member(t, decodeJSON(t, b.Fleet.Body), "meta")
			if got, want := meta["signatureAlgorithm"], tt.signer.Algorithm(); got != want {
				t.Errorf("meta.signatureAlgorithm = %v, want the signer's %q", got, want)
			}
			if tt.verifyWith == nil {
				return
			}
			for _, a := range b.Artifacts() {
				if !tt.verifyWith.Verify(a.Body, a.Sig) {
					t.Errorf("%s: signature does not verify", a.Path)
				}
			}
		})
	}
}

func TestSignWithoutSigner(t *testing.T) {
	t.Parallel()
	b, err := release.Sign(readFleet(t), release.Options{Commit: testCommit, Now: testNow})
	if err == nil || b != nil {
		t.Fatalf("Sign without a signer = %v, %v; want an error and no bundle", b, err)
	}
}

// TestSignSelfCheck covers the releases the self-check refuses.
//
// A release that is stale (or future-dated, or rejected) at Now cannot be
// produced, so there is no such case: meta.signedAt is Now truncated to the
// second, hence 0 <= Now - signedAt < 1s, while ValidateFleet requires
// every freshnessWindow to be at least one minute, and the self-check's
// roots have no rejectBefore. What the self-check can catch is a stamped
// document that validation lets through but verifiers refuse.
func TestSignSelfCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		unsigned func(t *testing.T) []byte
		now      time.Time
		wantErrs []error // any one of them
	}{
		{
			// RFC 3339 has four-digit years: the stamped signedAt
			// "10000-01-01T00:00:00Z" does not parse.
			name:     "signedAt after year 9999",
			unsigned: readFleet,
			now:      time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC),
			wantErrs: []error{trust.ErrMalformed},
		},
		{
			// Stamping keeps an existing meta.schemaVersion; verifiers of
			// version 1 refuse 2. Validation may catch it first.
			name: "meta.schemaVersion 2",
			unsigned: func(t *testing.T) []byte {
				return editFleet(t, readFleet(t), func(doc map[string]any) {
					member(t, doc, "meta")["schemaVersion"] = json.Number("2")
				})
			},
			now:      testNow,
			wantErrs: []error{trust.ErrUnsupportedSchema, manifest.ErrInvalidFleet},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := generateKey(t, proto.AlgorithmEd25519)
			b, err := release.Sign(tt.unsigned(t), release.Options{Signer: key, Commit: testCommit, Now: tt.now})
			if err == nil {
				t.Fatalf("Sign accepted a release that verifiers refuse; fleet:\n%s", b.Fleet.Body)
			}
			if !slices.ContainsFunc(tt.wantErrs, func(want error) bool { return errors.Is(err, want) }) {
				t.Fatalf("Sign error = %v, want one wrapping one of %v", err, tt.wantErrs)
			}
			if errors.Is(err, release.ErrSigner) {
				t.Errorf("Sign blamed the signer: %v", err)
			}
			if b != nil {
				t.Error("Sign returned a bundle along with the error")
			}
		})
	}
}

func TestSignDeterministic(t *testing.T) {
	t.Parallel()
	fleet := readFleet(t)
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, fleet); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&indented, compact.Bytes(), "", "\t"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		second []byte
	}{
		{name: "same input", second: fleet},
		{name: "compacted input", second: compact.Bytes()},
		{name: "re-indented input", second: indented.Bytes()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := generateKey(t, proto.AlgorithmEd25519)
			first := signFleet(t, key, fleet, testCommit)
			second := signFleet(t, key, tt.second, testCommit)
			if diff := cmp.Diff(first, second); diff != "" {
				t.Errorf("bundles differ (-first +second):\n%s", diff)
			}
		})
	}
}

// TestSignRefusesUnknownMembers: a member the format does not define (a
// misspelling) is refused by its path, not signed to be ignored; "x-"
// members and meta's are kept (TestSignKeepsUnknownMembers).
func TestSignRefusesUnknownMembers(t *testing.T) {
	t.Parallel()
	key := generateKey(t, proto.AlgorithmEd25519)
	unsigned := editFleet(t, readFleet(t), func(doc map[string]any) {
		member(t, doc, "hosts", "web-01")["tagz"] = []any{"web"}
		member(t, doc, "hosts", "web-01")["x-acme.io/owner"] = "ops" // an extension, its name with a dot
		member(t, doc, "channels", "edge")["x-note"] = "kept"
	})
	_, err := release.Sign(unsigned, release.Options{Signer: key, Commit: testCommit, Now: testNow})
	if !errors.Is(err, trust.ErrMalformed) || !strings.Contains(err.Error(), "hosts.web-01.tagz") || strings.Contains(err.Error(), "x-note") || strings.Contains(err.Error(), "owner") {
		t.Fatalf("Sign of a fleet with hosts.web-01.tagz: %v", err)
	}
}
