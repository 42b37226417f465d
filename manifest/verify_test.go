package manifest_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// verifyNow is the verifier's clock in these tests.
var verifyNow = time.Date(2025, 1, 15, 12, 0, 0, 0, time.UTC)

// releaseKey is a fresh CI release key and the trust roots pinning it.
type releaseKey struct {
	key   *trust.PrivateKey
	roots *trust.Roots
}

func newReleaseKey(t *testing.T) *releaseKey {
	t.Helper()
	key, err := trust.GenerateKey(proto.AlgorithmEd25519)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.Public().Proto()
	roots, err := trust.NewRoots(&proto.TrustFile{
		SchemaVersion: proto.SchemaVersion,
		CIReleaseKey:  proto.KeySlot{Current: &pub},
		CacheKeys:     []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &releaseKey{key: key, roots: roots}
}

// sign marshals m canonically and signs it, as `release sign` does.
func (k *releaseKey) sign(t *testing.T, m *proto.RolloutManifest) (body, sig []byte) {
	t.Helper()
	body, err := manifest.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sig, err = k.key.Sign(body)
	if err != nil {
		t.Fatal(err)
	}
	return body, sig
}

// stableManifest projects the fixture signed at signedAt and returns a
// fresh copy of its stable manifest, free to mutate.
func stableManifest(t *testing.T, signedAt time.Time) *proto.RolloutManifest {
	t.Helper()
	f := loadFixture(t)
	stamp(f, signedAt.UTC().Format(time.RFC3339), testCommit)
	return byChannel(project(t, f))["stable"]
}

const stableID = "stable@" + testCommit

func TestVerify(t *testing.T) {
	t.Parallel()
	key := newReleaseKey(t)
	fresh := verifyNow.Add(-10 * time.Minute)
	// The stable channel's window is 180 minutes, plus 60 s of skew.
	stale := verifyNow.Add(-(180*time.Minute + trust.ClockSkew + time.Second))
	canary := func(wave int, closure string) *manifest.HostExpect {
		return &manifest.HostExpect{Hostname: "canary-01", WaveIndex: wave, TargetClosure: closure}
	}
	canaryClosure := *loadFixture(t).Hosts["canary-01"].ClosureHash
	otherHash := strings.Repeat("0", 64)

	tests := []struct {
		name     string
		signedAt time.Time
		mutate   func(m *proto.RolloutManifest)
		// tamper changes the signed bytes or the signature after signing.
		tamper func(body, sig []byte) ([]byte, []byte)
		// exp is the expectation; a ContentHash of "good" is replaced by the
		// real content hash.
		exp      manifest.Expect
		wantErr  error
		wantCode string
	}{
		{name: "accepted, nothing expected", signedAt: fresh},
		{
			name:     "accepted, everything expected",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: stableID, ContentHash: "good", Host: canary(0, canaryClosure)},
		},
		{
			name:     "accepted, host without a target check",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: stableID, Host: &manifest.HostExpect{Hostname: "db-01", WaveIndex: 2}},
		},
		{
			name:     "accepted, last host of the set",
			signedAt: fresh,
			exp:      manifest.Expect{Host: &manifest.HostExpect{Hostname: "web-02", WaveIndex: 1}},
		},
		{
			name:     "accepted at the edge of the window",
			signedAt: verifyNow.Add(-(180*time.Minute + trust.ClockSkew)),
			exp:      manifest.Expect{RolloutID: stableID},
		},
		{
			name:     "accepted, window replaced by a longer one",
			signedAt: stale,
			exp:      manifest.Expect{RolloutID: stableID, FreshnessWindow: 5 * time.Hour},
		},
		{
			name:     "stale under a shorter replacement window",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: stableID, FreshnessWindow: 5 * time.Minute},
			wantErr:  trust.ErrStale, wantCode: "stale",
		},
		{
			name:     "rollout id: another ref expected",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: "stable@" + strings.Repeat("f", 40)},
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			name:     "rollout id: another channel expected",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: "edge@" + testCommit},
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			name:     "rollout id: short ref expected",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: "stable@" + testCommit[:7]},
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			// The fields agree with the expected id; channelRef does not
			// agree with meta.ciCommit.
			name:     "rollout id: channelRef is not meta.ciCommit",
			signedAt: fresh,
			mutate:   func(m *proto.RolloutManifest) { m.ChannelRef = strings.Repeat("9", 40) },
			exp:      manifest.Expect{RolloutID: "stable@" + strings.Repeat("9", 40)},
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			name:     "rollout id: channelRef is not meta.ciCommit, nothing expected",
			signedAt: fresh,
			mutate:   func(m *proto.RolloutManifest) { m.Meta.CICommit = ptr(strings.Repeat("9", 40)) },
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			name:     "rollout id: meta.ciCommit null",
			signedAt: fresh,
			mutate:   func(m *proto.RolloutManifest) { m.Meta.CICommit = nil },
			exp:      manifest.Expect{RolloutID: stableID},
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			name:     "manifest hash mismatch",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: stableID, ContentHash: otherHash},
			wantErr:  trust.ErrManifestHashMismatch, wantCode: "manifest_hash_mismatch",
		},
		{
			name:     "manifest hash in upper case",
			signedAt: fresh,
			exp:      manifest.Expect{ContentHash: "GOOD"},
			wantErr:  trust.ErrManifestHashMismatch, wantCode: "manifest_hash_mismatch",
		},
		{
			name:     "host not in manifest: unknown host",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: stableID, Host: &manifest.HostExpect{Hostname: "ghost-01"}},
			wantErr:  trust.ErrHostNotInManifest, wantCode: "host_not_in_manifest",
		},
		{
			name:     "host not in manifest: sorts before every host",
			signedAt: fresh,
			exp:      manifest.Expect{Host: &manifest.HostExpect{Hostname: "a"}},
			wantErr:  trust.ErrHostNotInManifest, wantCode: "host_not_in_manifest",
		},
		{
			name:     "host not in manifest: sorts after every host",
			signedAt: fresh,
			exp:      manifest.Expect{Host: &manifest.HostExpect{Hostname: "zz"}},
			wantErr:  trust.ErrHostNotInManifest, wantCode: "host_not_in_manifest",
		},
		{
			name:     "host not in manifest: host of another channel",
			signedAt: fresh,
			exp:      manifest.Expect{Host: &manifest.HostExpect{Hostname: "edge-01"}},
			wantErr:  trust.ErrHostNotInManifest, wantCode: "host_not_in_manifest",
		},
		{
			name:     "host not in manifest: wrong wave",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: stableID, Host: canary(1, canaryClosure)},
			wantErr:  trust.ErrHostNotInManifest, wantCode: "host_not_in_manifest",
		},
		{
			name:     "host not in manifest: wrong target closure",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: stableID, Host: canary(0, *loadFixture(t).Hosts["web-01"].ClosureHash)},
			wantErr:  trust.ErrHostNotInManifest, wantCode: "host_not_in_manifest",
		},
		{
			name:     "malformed: hostSet not sorted",
			signedAt: fresh,
			mutate: func(m *proto.RolloutManifest) {
				m.HostSet[0], m.HostSet[1] = m.HostSet[1], m.HostSet[0]
			},
			wantErr: trust.ErrMalformed, wantCode: "malformed",
		},
		{
			name:     "malformed: duplicate host",
			signedAt: fresh,
			mutate: func(m *proto.RolloutManifest) {
				m.HostSet = slices.Insert(m.HostSet, 1, m.HostSet[1])
			},
			wantErr: trust.ErrMalformed, wantCode: "malformed",
		},
		{
			name:     "malformed: duplicate host with another wave",
			signedAt: fresh,
			mutate: func(m *proto.RolloutManifest) {
				dup := m.HostSet[0]
				dup.WaveIndex = 2
				m.HostSet = slices.Insert(m.HostSet, 1, dup)
			},
			exp:     manifest.Expect{Host: canary(2, canaryClosure)},
			wantErr: trust.ErrMalformed, wantCode: "malformed",
		},
		{
			name:     "malformed: budget hosts not sorted",
			signedAt: fresh,
			mutate: func(m *proto.RolloutManifest) {
				b := slices.Clone(m.DisruptionBudgets)
				b[0].Hosts = []string{"web-02", "canary-01", "web-01"}
				m.DisruptionBudgets = b
			},
			wantErr: trust.ErrMalformed, wantCode: "malformed",
		},
		{
			name:     "malformed: no hostSet",
			signedAt: fresh,
			mutate:   func(m *proto.RolloutManifest) { m.HostSet = nil },
			wantErr:  trust.ErrMalformed, wantCode: "malformed",
		},
		{
			name:     "not signed: no signedAt",
			signedAt: fresh,
			mutate:   func(m *proto.RolloutManifest) { m.Meta.SignedAt = nil },
			exp:      manifest.Expect{RolloutID: stableID},
			wantErr:  trust.ErrNotSigned, wantCode: "not_signed",
		},
		{
			name:     "bad signature",
			signedAt: fresh,
			tamper: func(body, sig []byte) ([]byte, []byte) {
				sig = slices.Clone(sig)
				sig[0] ^= 1
				return body, sig
			},
			wantErr: trust.ErrBadSignature, wantCode: "bad_signature",
		},
		{
			name:     "body changed after signing",
			signedAt: fresh,
			tamper: func(body, sig []byte) ([]byte, []byte) {
				return bytes.Replace(body, []byte(`"waveIndex":2`), []byte(`"waveIndex":0`), 1), sig
			},
			exp:     manifest.Expect{Host: &manifest.HostExpect{Hostname: "db-01", WaveIndex: 0}},
			wantErr: trust.ErrBadSignature, wantCode: "bad_signature",
		},
		{
			name:     "schemaVersion 2",
			signedAt: fresh,
			mutate:   func(m *proto.RolloutManifest) { m.SchemaVersion = 2 },
			wantErr:  trust.ErrUnsupportedSchema, wantCode: "unsupported_schema",
		},
		{
			name:     "stale",
			signedAt: stale,
			exp:      manifest.Expect{RolloutID: stableID},
			wantErr:  trust.ErrStale, wantCode: "stale",
		},
		{
			name:     "future-dated",
			signedAt: verifyNow.Add(trust.ClockSkew + time.Second),
			wantErr:  trust.ErrFutureDated, wantCode: "future_dated",
		},
		// Pipeline order: the first failing step is the one reported.
		{
			name:     "order: stale before rollout id mismatch",
			signedAt: stale,
			exp:      manifest.Expect{RolloutID: "edge@" + testCommit},
			wantErr:  trust.ErrStale, wantCode: "stale",
		},
		{
			name:     "order: stale before channelRef mismatch",
			signedAt: stale,
			mutate:   func(m *proto.RolloutManifest) { m.ChannelRef = strings.Repeat("9", 40) },
			wantErr:  trust.ErrStale, wantCode: "stale",
		},
		{
			name:     "order: future-dated before hash mismatch",
			signedAt: verifyNow.Add(time.Hour),
			exp:      manifest.Expect{ContentHash: otherHash},
			wantErr:  trust.ErrFutureDated, wantCode: "future_dated",
		},
		{
			name:     "order: bad signature before rollout id mismatch",
			signedAt: fresh,
			tamper: func(body, sig []byte) ([]byte, []byte) {
				return body, make([]byte, trust.SignatureSize)
			},
			exp:     manifest.Expect{RolloutID: "edge@" + testCommit},
			wantErr: trust.ErrBadSignature, wantCode: "bad_signature",
		},
		{
			name:     "order: malformed before host check",
			signedAt: fresh,
			mutate: func(m *proto.RolloutManifest) {
				m.HostSet[0], m.HostSet[1] = m.HostSet[1], m.HostSet[0]
			},
			exp:     manifest.Expect{Host: &manifest.HostExpect{Hostname: "ghost"}},
			wantErr: trust.ErrMalformed, wantCode: "malformed",
		},
		{
			name:     "order: rollout id before hash mismatch",
			signedAt: fresh,
			exp:      manifest.Expect{RolloutID: "edge@" + testCommit, ContentHash: otherHash},
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			name:     "order: channelRef check before hash mismatch",
			signedAt: fresh,
			mutate:   func(m *proto.RolloutManifest) { m.ChannelRef = strings.Repeat("9", 40) },
			exp:      manifest.Expect{ContentHash: otherHash},
			wantErr:  trust.ErrRolloutIDMismatch, wantCode: "rollout_id_mismatch",
		},
		{
			name:     "order: hash mismatch before host check",
			signedAt: fresh,
			exp:      manifest.Expect{ContentHash: otherHash, Host: &manifest.HostExpect{Hostname: "ghost"}},
			wantErr:  trust.ErrManifestHashMismatch, wantCode: "manifest_hash_mismatch",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := stableManifest(t, tt.signedAt)
			if tt.mutate != nil {
				tt.mutate(m)
			}
			body, sig := key.sign(t, m)
			hash := sha256Hex(body)
			if tt.tamper != nil {
				body, sig = tt.tamper(body, sig)
			}
			exp := tt.exp
			switch exp.ContentHash {
			case "good":
				exp.ContentHash = hash
			case "GOOD":
				exp.ContentHash = strings.ToUpper(hash)
			}
			res, err := manifest.Verify(body, sig, key.roots, exp, verifyNow)
			if got := trust.Code(err); got != tt.wantCode {
				t.Fatalf("Verify: code %q, want %q (err = %v)", got, tt.wantCode, err)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Verify: errors.Is(err, %v) = false, err = %v", tt.wantErr, err)
				}
				if res != nil {
					t.Errorf("Verify returned a result with its error: %+v", res)
				}
				return
			}
			if res == nil || res.Manifest == nil {
				t.Fatalf("Verify: no manifest in result %+v", res)
			}
			want, err := proto.DecodeRolloutManifest(body)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, res.Manifest); diff != "" {
				t.Errorf("verified manifest (-want +got):\n%s", diff)
			}
			if res.SHA256 != hash || !bytes.Equal(res.Canonical, body) {
				t.Errorf("result hash %s, want %s; canonical bytes equal: %v", res.SHA256, hash, bytes.Equal(res.Canonical, body))
			}
			if res.Kind != proto.KindRolloutManifest || res.Slot != trust.SlotCurrent || res.Algorithm != proto.AlgorithmEd25519 {
				t.Errorf("result kind %q slot %q algorithm %q", res.Kind, res.Slot, res.Algorithm)
			}
			if got := res.Manifest.RolloutID(); got != stableID {
				t.Errorf("RolloutID() = %q, want %q", got, stableID)
			}
		})
	}
}

// TestVerifyEveryChannel signs each channel's manifest and checks every
// host of the fleet against every manifest: each host verifies only in its
// own channel's rollout, at its own wave.
func TestVerifyEveryChannel(t *testing.T) {
	t.Parallel()
	key := newReleaseKey(t)
	f := loadFixture(t)
	stamp(f, verifyNow.Add(-time.Minute).Format(time.RFC3339), testCommit)
	ms := project(t, f)
	waves := map[string]int{"canary-01": 0, "web-01": 1, "web-02": 1, "db-01": 2, "edge-01": 0, "edge-02": 0}
	for _, m := range ms {
		body, sig := key.sign(t, m)
		for host, wave := range waves {
			exp := manifest.Expect{
				RolloutID:   m.Channel + "@" + testCommit,
				ContentHash: sha256Hex(body),
				Host:        &manifest.HostExpect{Hostname: host, WaveIndex: wave, TargetClosure: *f.Hosts[host].ClosureHash},
			}
			_, err := manifest.Verify(body, sig, key.roots, exp, verifyNow)
			want := ""
			if f.Hosts[host].Channel != m.Channel {
				want = "host_not_in_manifest"
			}
			if got := trust.Code(err); got != want {
				t.Errorf("%s in %s: code %q, want %q (err = %v)", host, m.Channel, got, want, err)
			}
		}
	}
}

// TestVerifyReencoded checks that a manifest re-encoded in another JSON
// layout still verifies under the signature over its canonical form, with
// the same content hash.
func TestVerifyReencoded(t *testing.T) {
	t.Parallel()
	key := newReleaseKey(t)
	body, sig := key.sign(t, stableManifest(t, verifyNow.Add(-time.Minute)))
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, body, "", "\t"); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(pretty.Bytes(), body) {
		t.Fatal("indenting did not change the bytes")
	}
	res, err := manifest.Verify(pretty.Bytes(), sig, key.roots, manifest.Expect{RolloutID: stableID, ContentHash: sha256Hex(body)}, verifyNow)
	if err != nil {
		t.Fatalf("Verify(indented): %v", err)
	}
	if !bytes.Equal(res.Canonical, body) {
		t.Errorf("canonical bytes differ from the signed ones:\n%s\n%s", res.Canonical, body)
	}
}

// TestVerifyWrongKey checks that another key's signature is refused.
func TestVerifyWrongKey(t *testing.T) {
	t.Parallel()
	signer, verifier := newReleaseKey(t), newReleaseKey(t)
	body, sig := signer.sign(t, stableManifest(t, verifyNow))
	_, err := manifest.Verify(body, sig, verifier.roots, manifest.Expect{}, verifyNow)
	if got := trust.Code(err); got != "bad_signature" {
		t.Fatalf("code %q, want bad_signature (err = %v)", got, err)
	}
	_, err = manifest.Verify(body, sig, nil, manifest.Expect{}, verifyNow)
	if got := trust.Code(err); got != "no_trust_roots" {
		t.Fatalf("nil roots: code %q, want no_trust_roots (err = %v)", got, err)
	}
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	m := stableManifest(t, verifyNow)
	closure := func(h string) string { return *loadFixture(t).Hosts[h].ClosureHash }
	tests := []struct {
		name string
		host manifest.HostExpect
		want bool
	}{
		{"first host", manifest.HostExpect{Hostname: "canary-01", WaveIndex: 0, TargetClosure: closure("canary-01")}, true},
		{"middle host", manifest.HostExpect{Hostname: "db-01", WaveIndex: 2, TargetClosure: closure("db-01")}, true},
		{"last host, no target check", manifest.HostExpect{Hostname: "web-02", WaveIndex: 1}, true},
		{"wrong wave", manifest.HostExpect{Hostname: "db-01", WaveIndex: 1}, false},
		{"negative wave", manifest.HostExpect{Hostname: "canary-01", WaveIndex: -1}, false},
		{"wrong closure", manifest.HostExpect{Hostname: "web-01", WaveIndex: 1, TargetClosure: closure("web-02")}, false},
		{"other channel", manifest.HostExpect{Hostname: "edge-02"}, false},
		{"prefix of a host", manifest.HostExpect{Hostname: "web-0", WaveIndex: 1}, false},
		{"empty name", manifest.HostExpect{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := manifest.CheckHost(m, tt.host)
			if tt.want {
				if err != nil {
					t.Fatalf("CheckHost: %v", err)
				}
				return
			}
			if !errors.Is(err, trust.ErrHostNotInManifest) || trust.Code(err) != "host_not_in_manifest" {
				t.Fatalf("CheckHost = %v, want host_not_in_manifest", err)
			}
			if !strings.Contains(err.Error(), stableID) {
				t.Errorf("error does not name the rollout: %v", err)
			}
		})
	}
}
