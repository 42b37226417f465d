package trust_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

var update = flag.Bool("update", false, "regenerate testdata/trust/vectors")

const vectorDir = "../testdata/trust/vectors"

// vector is one file of testdata/trust/vectors. The format is documented in
// that directory's README so other implementations can run the same cases.
type vector struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Kind        proto.Kind      `json:"kind"`
	Trust       json.RawMessage `json:"trust"`
	// Artifact holds the exact bytes when they are valid UTF-8;
	// ArtifactBase64 otherwise.
	Artifact               *string     `json:"artifact,omitempty"`
	ArtifactBase64         string      `json:"artifactBase64,omitempty"`
	Signature              string      `json:"signature"`
	Now                    string      `json:"now"`
	FreshnessWindowMinutes int         `json:"freshnessWindowMinutes,omitempty"`
	ExpectRolloutID        string      `json:"expectRolloutId,omitempty"`
	ExpectManifestHash     string      `json:"expectManifestHash,omitempty"`
	ExpectHost             *hostExpect `json:"expectHost,omitempty"`
	ExpectedCode           string      `json:"expectedCode"`
}

type hostExpect struct {
	Hostname      string `json:"hostname"`
	WaveIndex     int    `json:"waveIndex"`
	TargetClosure string `json:"targetClosure,omitempty"`
}

func (v *vector) artifact(t *testing.T) []byte {
	if v.Artifact != nil {
		return []byte(*v.Artifact)
	}
	b, err := base64.StdEncoding.DecodeString(v.ArtifactBase64)
	if err != nil {
		t.Fatalf("%s: artifactBase64: %v", v.Name, err)
	}
	return b
}

// run verifies the vector and returns the resulting code ("ok" when
// accepted).
func (v *vector) run(t *testing.T) string {
	roots, err := trust.ParseRoots(v.Trust)
	if err != nil {
		return trust.Code(err)
	}
	sig, err := base64.StdEncoding.DecodeString(v.Signature)
	if err != nil {
		t.Fatalf("%s: signature: %v", v.Name, err)
	}
	now, err := time.Parse(time.RFC3339, v.Now)
	if err != nil {
		t.Fatalf("%s: now: %v", v.Name, err)
	}
	window := time.Duration(v.FreshnessWindowMinutes) * time.Minute
	if v.Kind == proto.KindRolloutManifest {
		exp := manifest.Expect{RolloutID: v.ExpectRolloutID, ContentHash: v.ExpectManifestHash, FreshnessWindow: window}
		if h := v.ExpectHost; h != nil {
			exp.Host = &manifest.HostExpect{Hostname: h.Hostname, WaveIndex: h.WaveIndex, TargetClosure: h.TargetClosure}
		}
		_, err = manifest.Verify(v.artifact(t), sig, roots, exp, now)
	} else {
		_, err = trust.Verify(v.artifact(t), sig, roots, trust.Policy{Kind: v.Kind, FreshnessWindow: window}, now)
	}
	if err != nil {
		return trust.Code(err)
	}
	return "ok"
}

// TestVectors runs every shipped vector and checks that together they cover
// every verification code.
func TestVectors(t *testing.T) {
	if *update {
		writeVectors(t)
	}
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vectors in %s (run with -update): %v", vectorDir, err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		var v vector
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if got := v.run(t); got != v.ExpectedCode {
			t.Errorf("%s: got %q, want %q (%s)", v.Name, got, v.ExpectedCode, v.Description)
		}
		seen[v.ExpectedCode] = true
	}
	for _, code := range append(trust.Codes()[:12], "invalid_trust_roots", "ok") {
		if !seen[code] {
			t.Errorf("no vector expects %q", code)
		}
	}
}

// ---- generation (only with -update) ----

var (
	t0     = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	commit = "c0ffee0000000000000000000000000000000001"
)

type keys struct {
	k1, k2, k3, e1 *trust.PrivateKey
}

func vectorKeys(t testing.TB) keys {
	ed := func(b byte) *trust.PrivateKey {
		return trust.NewEd25519Key(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, 32)))
	}
	scalar := bytes.Repeat([]byte{0x42}, 32)
	ec, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), scalar)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	e1, err := trust.ParsePrivateKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return keys{k1: ed(1), k2: ed(2), k3: ed(3), e1: e1}
}

type slot = map[string]any

func trustJSON(t testing.TB, ks slot) json.RawMessage {
	b, err := json.Marshal(map[string]any{"schemaVersion": 1, "ciReleaseKey": ks, "cacheKeys": []string{}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pk(k *trust.PrivateKey) proto.PublicKey { return k.Public().Proto() }

// baseFleet is a small valid fleet signed at t0: one channel with a
// 60-minute window.
func baseFleet() map[string]any {
	return map[string]any{
		"schemaVersion": 1,
		"hosts": map[string]any{
			"web-01": map[string]any{"system": "x86_64-linux", "tags": []any{"web"}, "channel": "stable",
				"closureHash": "6cp643dzvlxxpkgbg5kzmwj47sam9zs2-nixos-system-web-01", "pubkey": nil},
			"web-02": map[string]any{"system": "x86_64-linux", "tags": []any{"web"}, "channel": "stable",
				"closureHash": "4lmnzx45iy43kwjqn1xna7z3dj8grrz5-nixos-system-web-02", "pubkey": nil},
		},
		"channels": map[string]any{
			"stable": map[string]any{"rolloutPolicy": "p", "freshnessWindow": 60, "signingIntervalMinutes": 30,
				"reconcileIntervalMinutes": 5, "compliance": map[string]any{"frameworks": []any{}, "mode": "disabled"}},
		},
		"rolloutPolicies": map[string]any{
			"p": map[string]any{"strategy": "staged", "waves": []any{map[string]any{"selector": map[string]any{"all": true}, "soakMinutes": 5}},
				"healthGate": map[string]any{}, "onHealthFailure": "halt"},
		},
		"waves": map[string]any{"stable": []any{
			map[string]any{"hosts": []any{"web-01"}, "soakMinutes": 5},
			map[string]any{"hosts": []any{"web-01", "web-02"}, "soakMinutes": 0},
		}},
		"edges": []any{}, "channelEdges": []any{},
		"disruptionBudgets": []any{map[string]any{"selector": map[string]any{"tags": []any{"web"}}, "maxInFlight": 1}},
		"meta":              map[string]any{"schemaVersion": 1, "signedAt": t0.Format(time.RFC3339), "ciCommit": commit, "signatureAlgorithm": "ed25519"},
	}
}

func canon(t testing.TB, doc any) []byte {
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := trust.Canonicalize(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sign(t testing.TB, k *trust.PrivateKey, body []byte) []byte {
	sig, err := k.Sign(body)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// stableManifest projects baseFleet's channel and returns its canonical
// bytes and content hash.
func stableManifest(t testing.TB, mutate func(*proto.RolloutManifest)) ([]byte, string) {
	f, err := proto.DecodeFleetResolved(canon(t, baseFleet()))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := manifest.Project(f, strings.Repeat("ab", 32))
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	if mutate != nil {
		mutate(m)
	}
	body, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c, err := trust.Canonicalize(body)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c)
	return c, hex.EncodeToString(sum[:])
}

func writeVectors(t *testing.T) {
	ks := vectorKeys(t)
	tK1 := trustJSON(t, slot{"current": pk(ks.k1)})
	fleet := canon(t, baseFleet())
	okSig := sign(t, ks.k1, fleet)
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }
	variant := func(mutate func(map[string]any)) []byte {
		doc := baseFleet()
		mutate(doc)
		return canon(t, doc)
	}
	meta := func(doc map[string]any) map[string]any { return doc["meta"].(map[string]any) }

	var vs []vector
	add := func(name, desc string, kind proto.Kind, tr json.RawMessage, artifact, sig []byte, now, code string, opts ...func(*vector)) {
		v := vector{Name: name, Description: desc, Kind: kind, Trust: tr, Signature: base64.StdEncoding.EncodeToString(sig), Now: now, ExpectedCode: code}
		if utf8.Valid(artifact) {
			s := string(artifact)
			v.Artifact = &s
		} else {
			v.ArtifactBase64 = base64.StdEncoding.EncodeToString(artifact)
		}
		for _, o := range opts {
			o(&v)
		}
		vs = append(vs, v)
	}
	fr := proto.KindFleetResolved
	mf := proto.KindRolloutManifest

	// Accepted, and key rotation.
	add("ok-ed25519", "fleet.resolved signed by the current ed25519 key", fr, tK1, fleet, okSig, at(10*time.Minute), "ok")
	ecFleet := variant(func(d map[string]any) { meta(d)["signatureAlgorithm"] = "ecdsa-p256" })
	ecSig := sign(t, ks.e1, ecFleet)
	tE1 := trustJSON(t, slot{"current": pk(ks.e1)})
	add("ok-ecdsa-p256", "signed by an ecdsa-p256 key: SHA-256, r‖s, low-S", fr, tE1, ecFleet, ecSig, at(time.Minute), "ok")
	add("ok-ecdsa-p256-high-s", "the same signature with s replaced by n-s is normalised and accepted", fr, tE1, ecFleet, highS(ecSig), at(time.Minute), "ok")
	add("bad-ecdsa-p256-r-zero", "r = 0 is never valid", fr, tE1, ecFleet, append(make([]byte, 32), ecSig[32:]...), at(time.Minute), "bad_signature")
	add("ok-previous-key", "signed by the previous key after a rotation", fr, trustJSON(t, slot{"current": pk(ks.k2), "previous": pk(ks.k1)}), fleet, okSig, at(time.Minute), "ok")
	rot := trustJSON(t, slot{"current": pk(ks.k1), "successor": pk(ks.k2), "retireAt": at(20 * time.Minute)})
	add("ok-current-before-retire", "current is accepted before retireAt", fr, rot, fleet, okSig, at(19*time.Minute), "ok")
	add("ok-successor-before-retire", "the successor is accepted before retireAt (CI may switch early)", fr, rot, fleet, sign(t, ks.k2, fleet), at(19*time.Minute), "ok")
	add("bad-current-after-retire", "at and after retireAt the current key no longer verifies", fr, rot, fleet, okSig, at(20*time.Minute), "bad_signature")
	add("ok-successor-after-retire", "after retireAt the successor carries on", fr, rot, fleet, sign(t, ks.k2, fleet), at(30*time.Minute), "ok")
	pretty, err := json.MarshalIndent(baseFleet(), "", "    ")
	if err != nil {
		t.Fatal(err)
	}
	add("ok-pretty-printed", "whitespace and member order do not matter: the signature covers the canonical form", fr, tK1, pretty, okSig, at(time.Minute), "ok")
	unknown := variant(func(d map[string]any) {
		d["x-future"] = map[string]any{"n": 1.5, "list": []any{"a"}}
		d["hosts"].(map[string]any)["web-01"].(map[string]any)["x-rack"] = "r12"
	})
	add("ok-unknown-fields", "unknown members are tolerated and covered by the signature", fr, tK1, unknown, sign(t, ks.k1, unknown), at(time.Minute), "ok")
	add("bad-unknown-field-added", "adding an unknown member after signing breaks the signature", fr, tK1, unknown, okSig, at(time.Minute), "bad_signature")

	// 1. no_trust_roots.
	add("no-trust-roots-empty", "trust.json without keys", fr, trustJSON(t, slot{}), fleet, okSig, at(time.Minute), "no_trust_roots")
	add("no-trust-roots-null", "every slot null", fr, trustJSON(t, slot{"current": nil, "previous": nil, "successor": nil}), fleet, okSig, at(time.Minute), "no_trust_roots")

	// 2. malformed.
	s := string(fleet)
	for _, m := range []struct{ name, desc, body string }{
		{"malformed-not-json", "truncated document", s[:len(s)-1]},
		{"malformed-duplicate-key", "a member name appears twice", strings.Replace(s, `"schemaVersion":1,"waves"`, `"schemaVersion":1,"schemaVersion":1,"waves"`, 1)},
		{"malformed-duplicate-after-unescape", `"hosts" and "\u0068osts"`, strings.Replace(s, `{"channelEdges"`, `{"\u0068osts":{},"channelEdges"`, 1)},
		{"malformed-lone-surrogate", "an escaped high surrogate without its low half", strings.Replace(s, `"x86_64-linux"`, `"x86_64-linux\ud800"`, 1)},
		{"malformed-trailing-data", "a second document after the first", s + `{}`},
		{"malformed-non-finite", "a number that overflows a double", strings.Replace(s, `"freshnessWindow":60`, `"freshnessWindow":1e400`, 1)},
		{"malformed-float-for-integer", "freshnessWindow must be an integer literal", strings.Replace(s, `"freshnessWindow":60`, `"freshnessWindow":60.5`, 1)},
		{"malformed-case-variant", "SchemaVersion next to schemaVersion", strings.Replace(s, `"schemaVersion":1,"waves"`, `"SchemaVersion":2,"schemaVersion":1,"waves"`, 1)},
		{"malformed-not-object", "top-level array", `[` + s + `]`},
		{"malformed-too-deep", "nesting beyond 32 levels", strings.Replace(s, `"edges":[]`, `"edges":[]`+`,"x":`+strings.Repeat("[", 40)+strings.Repeat("]", 40), 1)},
		{"malformed-wrong-type", "edges is an object", strings.Replace(s, `"edges":[]`, `"edges":{}`, 1)},
	} {
		if m.body == s {
			t.Fatalf("%s: the edit did not apply", m.name)
		}
		add(m.name, m.desc, fr, tK1, []byte(m.body), okSig, at(time.Minute), "malformed")
	}
	add("malformed-invalid-utf8", "a byte sequence that is not UTF-8 inside a string", fr, tK1, []byte(strings.Replace(s, "x86_64-linux", "x86_64-linux\xc3\x28", 1)), okSig, at(time.Minute), "malformed")

	// 3. bad_signature.
	add("bad-signature-wrong-key", "signed by a key that is not trusted", fr, tK1, fleet, sign(t, ks.k3, fleet), at(time.Minute), "bad_signature")
	tampered := []byte(strings.Replace(s, "6cp643dzvlxxpkgbg5kzmwj47sam9zs2", "6cp643dzvlxxpkgbg5kzmwj47sam9zs3", 1))
	add("bad-signature-tampered", "one character of a closure hash changed", fr, tK1, tampered, okSig, at(time.Minute), "bad_signature")
	add("bad-signature-truncated", "a 63-byte signature", fr, tK1, fleet, okSig[:63], at(time.Minute), "bad_signature")
	add("bad-signature-base64-file", "the .sig holds base64 text instead of raw bytes", fr, tK1, fleet, []byte(base64.StdEncoding.EncodeToString(okSig)), at(time.Minute), "bad_signature")
	add("bad-signature-ed25519-s-plus-l", "S + L: the same signature in a non-canonical, malleable form", fr, tK1, fleet, trust.SPlusL(okSig), at(time.Minute), "bad_signature")

	// 4. unsupported_algorithm.
	rsa := proto.PublicKey{Algorithm: "rsa-pss", Public: "AAAA"}
	add("unsupported-algorithm", "the only trusted key has an algorithm this build does not know", fr, trustJSON(t, slot{"current": rsa}), fleet, okSig, at(time.Minute), "unsupported_algorithm")
	add("bad-signature-over-unsupported", "with one supported key that does not verify, bad_signature wins", fr, trustJSON(t, slot{"current": rsa, "previous": pk(ks.k1)}), fleet, sign(t, ks.k3, fleet), at(time.Minute), "bad_signature")
	add("ok-unsupported-next-to-supported", "an unsupported key does not stop a supported one", fr, trustJSON(t, slot{"current": rsa, "previous": pk(ks.k1)}), fleet, okSig, at(time.Minute), "ok")

	// 5. unsupported_schema.
	v2 := variant(func(d map[string]any) { d["schemaVersion"] = 2 })
	add("unsupported-schema", "schemaVersion 2, correctly signed", fr, tK1, v2, sign(t, ks.k1, v2), at(time.Minute), "unsupported_schema")
	v2shape := variant(func(d map[string]any) { d["schemaVersion"] = 2; d["hosts"] = []any{"a"} })
	add("unsupported-schema-other-shape", "a v2 document is not judged by v1's shape", fr, tK1, v2shape, sign(t, ks.k1, v2shape), at(time.Minute), "unsupported_schema")
	add("bad-signature-before-schema", "schemaVersion 2 with a bad signature reports the signature", fr, tK1, v2, okSig, at(time.Minute), "bad_signature")
	metaV2 := variant(func(d map[string]any) { meta(d)["schemaVersion"] = 2 })
	add("unsupported-meta-schema", "meta.schemaVersion 2", fr, tK1, metaV2, sign(t, ks.k1, metaV2), at(time.Minute), "unsupported_schema")

	// 6. not_signed.
	unsignedNull := variant(func(d map[string]any) { meta(d)["signedAt"] = nil })
	add("not-signed-null", "meta.signedAt null, as mkFleet emits it", fr, tK1, unsignedNull, sign(t, ks.k1, unsignedNull), at(time.Minute), "not_signed")
	unsignedAbsent := variant(func(d map[string]any) { delete(meta(d), "signedAt") })
	add("not-signed-absent", "meta.signedAt absent", fr, tK1, unsignedAbsent, sign(t, ks.k1, unsignedAbsent), at(time.Minute), "not_signed")

	// 7. rejected_before.
	add("rejected-before", "signed one second before rejectBefore", fr, trustJSON(t, slot{"current": pk(ks.k1), "rejectBefore": at(time.Second)}), fleet, okSig, at(time.Minute), "rejected_before")
	add("ok-at-reject-before", "signed exactly at rejectBefore", fr, trustJSON(t, slot{"current": pk(ks.k1), "rejectBefore": at(0)}), fleet, okSig, at(time.Minute), "ok")

	// 8. stale, 9. future_dated: exact boundaries (window 60 min, skew 60 s).
	add("ok-stale-boundary", "exactly window + 60 s after signing", fr, tK1, fleet, okSig, at(61*time.Minute), "ok")
	add("stale", "one second past window + 60 s", fr, tK1, fleet, okSig, at(61*time.Minute+time.Second), "stale")
	add("stale-override", "an explicit 10-minute window replaces the channel's", fr, tK1, fleet, okSig, at(11*time.Minute+time.Second), "stale", func(v *vector) { v.FreshnessWindowMinutes = 10 })
	twoCh := variant(func(d map[string]any) {
		d["channels"].(map[string]any)["lts"] = map[string]any{"rolloutPolicy": "p", "freshnessWindow": 1440, "signingIntervalMinutes": 60,
			"reconcileIntervalMinutes": 5, "compliance": map[string]any{"frameworks": []any{}, "mode": "disabled"}}
	})
	add("stale-shortest-channel", "every channel's window must hold: the 60-minute channel makes a 2-hour-old fleet stale", fr, tK1, twoCh, sign(t, ks.k1, twoCh), at(2*time.Hour), "stale")
	add("ok-future-boundary", "signed exactly 60 s in the future", fr, tK1, fleet, okSig, at(-time.Minute), "ok")
	add("future-dated", "signed 61 s in the future", fr, tK1, fleet, okSig, at(-time.Minute-time.Second), "future_dated")

	// Manifests.
	mBody, mHash := stableManifest(t, nil)
	mSig := sign(t, ks.k1, mBody)
	id := "stable@" + commit
	host := func(name string, wave int, target string) func(*vector) {
		return func(v *vector) { v.ExpectHost = &hostExpect{Hostname: name, WaveIndex: wave, TargetClosure: target} }
	}
	withID := func(id string) func(*vector) { return func(v *vector) { v.ExpectRolloutID = id } }
	withHash := func(h string) func(*vector) { return func(v *vector) { v.ExpectManifestHash = h } }
	add("manifest-ok", "a manifest with its id, content hash and a host's membership", mf, tK1, mBody, mSig, at(time.Minute), "ok",
		withID(id), withHash(mHash), host("web-02", 1, "4lmnzx45iy43kwjqn1xna7z3dj8grrz5-nixos-system-web-02"))
	var mDoc any
	if err := json.Unmarshal(mBody, &mDoc); err != nil {
		t.Fatal(err)
	}
	mPretty, _ := json.MarshalIndent(mDoc, "", "  ")
	add("manifest-ok-pretty", "a re-indented manifest has the same content hash", mf, tK1, mPretty, mSig, at(time.Minute), "ok", withHash(mHash))
	add("manifest-stale", "the manifest's own freshnessWindow applies", mf, tK1, mBody, mSig, at(61*time.Minute+time.Second), "stale")
	add("rollout-id-mismatch", "fetched as another rollout", mf, tK1, mBody, mSig, at(time.Minute), "rollout_id_mismatch", withID("stable@c0ffee0000000000000000000000000000000002"))
	badRef, _ := stableManifest(t, func(m *proto.RolloutManifest) { m.ChannelRef = "c0ffee0000000000000000000000000000000002" })
	add("rollout-id-mismatch-channel-ref", "channelRef is not meta.ciCommit", mf, tK1, badRef, sign(t, ks.k1, badRef), at(time.Minute), "rollout_id_mismatch")
	add("manifest-hash-mismatch", "a different manifest than the rollout recorded", mf, tK1, mBody, mSig, at(time.Minute), "manifest_hash_mismatch", withHash(strings.Repeat("0", 64)))
	add("host-not-in-manifest", "a host that is not in the rollout", mf, tK1, mBody, mSig, at(time.Minute), "host_not_in_manifest", host("db-01", 0, ""))
	add("host-not-in-manifest-wave", "the host is in wave 1, not 0", mf, tK1, mBody, mSig, at(time.Minute), "host_not_in_manifest", host("web-02", 0, ""))
	add("host-not-in-manifest-target", "the host's target closure differs", mf, tK1, mBody, mSig, at(time.Minute), "host_not_in_manifest", host("web-01", 0, "0000000000000000000000000000000a-other"))
	add("stale-before-rollout-id", "checks run in order: stale is reported before a rollout id mismatch", mf, tK1, mBody, mSig, at(2*time.Hour), "stale", withID("other@x"))
	unsorted, _ := stableManifest(t, func(m *proto.RolloutManifest) { slices.Reverse(m.HostSet) })
	add("manifest-malformed-unsorted", "a signed manifest whose hostSet is not sorted by hostname", mf, tK1, unsorted, sign(t, ks.k1, unsorted), at(time.Minute), "malformed")

	// Trust roots that must not load.
	add("invalid-roots-small-order-key", "the identity point as an ed25519 key", fr,
		trustJSON(t, slot{"current": proto.PublicKey{Algorithm: "ed25519", Public: base64.StdEncoding.EncodeToString(append([]byte{1}, make([]byte, 31)...))}}),
		fleet, okSig, at(time.Minute), "invalid_trust_roots")
	add("invalid-roots-retire-without-successor", "retireAt would retire the only key", fr,
		trustJSON(t, slot{"current": pk(ks.k1), "retireAt": at(time.Hour)}), fleet, okSig, at(time.Minute), "invalid_trust_roots")

	old, _ := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	for _, f := range old {
		os.Remove(f)
	}
	if err := os.MkdirAll(vectorDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%03d-%s.json", i+1, v.Name)
		if err := os.WriteFile(filepath.Join(vectorDir, name), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func highS(sig []byte) []byte {
	n := elliptic.P256().Params().N
	out := bytes.Clone(sig)
	s := new(big.Int).SetBytes(sig[32:])
	new(big.Int).Sub(n, s).FillBytes(out[32:])
	return out
}
