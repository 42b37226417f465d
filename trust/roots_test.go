package trust

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
)

func seededKey(b byte) *PrivateKey {
	return NewEd25519Key(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, 32)))
}

func pubOf(k *PrivateKey) *proto.PublicKey {
	p := k.Public().Proto()
	return &p
}

func str(s string) *string { return &s }

func TestRootsActive(t *testing.T) {
	t.Parallel()
	cur, succ, prev := seededKey(1), seededKey(2), seededKey(3)
	retire := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	roots, err := NewRoots(&proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{
		Current: pubOf(cur), Successor: pubOf(succ), Previous: pubOf(prev),
		RetireAt: str(retire.Format(time.RFC3339)),
	}})
	if err != nil {
		t.Fatal(err)
	}
	slots := func(now time.Time) []string {
		var out []string
		for _, k := range roots.Active(now) {
			out = append(out, k.Slot)
		}
		return out
	}
	if diff := cmp.Diff([]string{SlotCurrent, SlotSuccessor, SlotPrevious}, slots(retire.Add(-time.Second))); diff != "" {
		t.Errorf("before retireAt (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{SlotSuccessor, SlotPrevious}, slots(retire)); diff != "" {
		t.Errorf("at retireAt (-want +got):\n%s", diff)
	}

	only, err := NewRoots(&proto.TrustFile{SchemaVersion: 1, CIReleaseKey: proto.KeySlot{Current: pubOf(cur), Successor: pubOf(succ)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(only.Active(retire.AddDate(10, 0, 0))); got != 2 {
		t.Errorf("without retireAt both keys stay active, got %d", got)
	}
}

func TestRootsErrors(t *testing.T) {
	t.Parallel()
	good := pubOf(seededKey(1))
	tests := []struct {
		name string
		json string
		want string
	}{
		{name: "schema", json: `{"schemaVersion":2,"ciReleaseKey":{}}`, want: "schemaVersion 2"},
		{name: "not json", json: `{`, want: "malformed"},
		{name: "duplicate", json: `{"schemaVersion":1,"schemaVersion":1}`, want: "duplicate member"},
		{name: "bad key", json: `{"schemaVersion":1,"ciReleaseKey":{"current":{"algorithm":"ed25519","public":"AAAA"}}}`, want: "ciReleaseKey.current"},
		{name: "small-order key", json: `{"schemaVersion":1,"ciReleaseKey":{"current":{"algorithm":"ed25519","public":"AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}}}`, want: "identity"},
		{name: "retireAt without successor", json: `{"schemaVersion":1,"ciReleaseKey":{"current":{"algorithm":"ed25519","public":"` + good.Public + `"},"retireAt":"2026-01-01T00:00:00Z"}}`, want: "no successor"},
		{name: "bad time", json: `{"schemaVersion":1,"ciReleaseKey":{"rejectBefore":"yesterday"}}`, want: "rejectBefore is not an RFC 3339 time"},
		{name: "bad cache key", json: `{"schemaVersion":1,"ciReleaseKey":{},"cacheKeys":["nocolon"]}`, want: "cacheKeys[0]"},
		{name: "short cache key", json: `{"schemaVersion":1,"ciReleaseKey":{},"cacheKeys":["c:AAAA"]}`, want: "32 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseRoots([]byte(tt.json))
			if !errors.Is(err, ErrInvalidRoots) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseRoots = %v, want ErrInvalidRoots mentioning %q", err, tt.want)
			}
			if Code(err) != "invalid_trust_roots" {
				t.Fatalf("Code = %q", Code(err))
			}
		})
	}
}

func TestRootsKeepUnsupportedAlgorithms(t *testing.T) {
	t.Parallel()
	roots, err := ParseRoots([]byte(`{"schemaVersion":1,"ciReleaseKey":{"current":{"algorithm":"rsa-pss","public":"AAAA"}},
		"cacheKeys":["cache.example.org-1:6NCHdD59X431o0gWypbMrAURkbJ16ZPMQFGspcDShjY="]}`))
	if err != nil {
		t.Fatal(err)
	}
	active := roots.Active(time.Now())
	if len(active) != 1 || active[0].Key != nil || active[0].Algorithm != "rsa-pss" {
		t.Fatalf("active = %+v", active)
	}
	if got := roots.CacheKeys(); len(got) != 1 || !strings.HasPrefix(got[0], "cache.example.org-1:") {
		t.Fatalf("cache keys = %v", got)
	}
}

func TestCodes(t *testing.T) {
	t.Parallel()
	want := []string{"no_trust_roots", "malformed", "bad_signature", "unsupported_algorithm", "unsupported_schema",
		"not_signed", "rejected_before", "stale", "future_dated", "rollout_id_mismatch", "manifest_hash_mismatch",
		"host_not_in_manifest", "invalid_trust_roots", "invalid_key"}
	if diff := cmp.Diff(want, Codes()); diff != "" {
		t.Fatalf("codes (-want +got):\n%s", diff)
	}
	if Code(nil) != "" || Code(errors.New("x")) != "internal" {
		t.Fatal("Code of nil or an unknown error")
	}
	wrapped := errors.Join(errors.New("context"), ErrStale)
	if Code(wrapped) != "stale" {
		t.Fatalf("Code(wrapped) = %q", Code(wrapped))
	}
}
