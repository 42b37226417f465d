package proto

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readFixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../testdata/fleets/two-channels.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeFleetResolvedFixture(t *testing.T) {
	t.Parallel()
	f, err := DecodeFleetResolved(readFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(f.Hosts), 6; got != want {
		t.Fatalf("hosts = %d, want %d", got, want)
	}
	if got := f.Channels["stable"].FreshnessWindow; got != 180 {
		t.Fatalf("stable freshnessWindow = %d, want 180", got)
	}
	if f.Hosts["web-01"].ClosureHash == nil || f.Meta.SignedAt != nil {
		t.Fatalf("closureHash/signedAt nullability not kept: %+v %+v", f.Hosts["web-01"], f.Meta)
	}
	if got := *f.RolloutPolicies["canary-then-web-then-rest"].HealthGate.MaxFailures; got != 1 {
		t.Fatalf("maxFailures = %d", got)
	}
	want := []ChannelEdge{{Gates: "edge", Gated: "stable", Reason: "edge proves a release first"}}
	if diff := cmp.Diff(want, f.ChannelEdges); diff != "" {
		t.Fatalf("channelEdges (-want +got):\n%s", diff)
	}
}

func TestDecodeStrictness(t *testing.T) {
	t.Parallel()
	const minimal = `{"schemaVersion":1,"hosts":{},"channels":{},"meta":{"schemaVersion":1}}`
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{name: "minimal", in: minimal},
		{name: "unknown members tolerated", in: `{"schemaVersion":1,"hosts":{"h":{"channel":"c","futureField":{"x":[1.5]}}},"extra":true,"meta":{}}`},
		{name: "duplicate member", in: `{"schemaVersion":1,"schemaVersion":2}`, wantErr: "duplicate member name"},
		{name: "duplicate host", in: `{"hosts":{"a":{},"a":{}}}`, wantErr: "duplicate member name"},
		{name: "fraction in integer", in: `{"schemaVersion":1.0}`, wantErr: "schemaVersion: cannot use JSON number 1.0 as int"},
		{name: "exponent in integer", in: `{"channels":{"c":{"freshnessWindow":1e2}}}`, wantErr: "channels.freshnessWindow: cannot use JSON number 1e2 as int"},
		{name: "string in integer", in: `{"schemaVersion":"1"}`, wantErr: "cannot use JSON string as int"},
		{name: "case variant of a field", in: `{"schemaVersion":1,"SchemaVersion":2}`, wantErr: `member name "SchemaVersion" differs from "schemaVersion" only in letter case`},
		{name: "case variant nested", in: `{"hosts":{"h":{"Channel":"x"}}}`, wantErr: `differs from "channel" only in letter case`},
		{name: "unicode fold variant", in: "{\"\u017fchemaVersion\":2}", wantErr: "only in letter case"},
		{name: "host named like a field is fine", in: `{"hosts":{"Channel":{"channel":"c"}}}`},
		{name: "not an object", in: `[]`, wantErr: "top-level value is not an object"},
		{name: "trailing data", in: minimal + `x`, wantErr: "unexpected data after"},
		{name: "too deep", in: `{"x":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`, wantErr: "nesting deeper than 32"},
		{name: "legacy channel edge", in: `{"channelEdges":[{"before":"a","after":"b"}]}`},
		{name: "both spellings of an edge end", in: `{"channelEdges":[{"gates":"a","before":"a","gated":"b"}]}`, wantErr: `sets both "gates" and its legacy alias "before"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := DecodeFleetResolved([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if tt.name == "legacy channel edge" && (f.ChannelEdges[0].Gates != "a" || f.ChannelEdges[0].Gated != "b") {
					t.Fatalf("legacy edge not folded: %+v", f.ChannelEdges[0])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want containing %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
		})
	}
}

func TestDecodeSizeCap(t *testing.T) {
	t.Parallel()
	big := make([]byte, MaxBytes+1)
	_, err := DecodeTrustFile(big)
	if err == nil || !strings.Contains(err.Error(), "exceeds the") {
		t.Fatalf("error = %v, want size error", err)
	}
}

func TestDetectKind(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Kind{
		`{"hosts":{}}`:   KindFleetResolved,
		`{"hostSet":[]}`: KindRolloutManifest,
	} {
		got, err := DetectKind([]byte(in))
		if err != nil || got != want {
			t.Errorf("DetectKind(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{`{}`, `{"hosts":{},"hostSet":[]}`} {
		if _, err := DetectKind([]byte(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("DetectKind(%s) error = %v, want ErrMalformed", in, err)
		}
	}
}

func TestSelector(t *testing.T) {
	t.Parallel()
	hosts := map[string]Host{
		"a": {Tags: []string{"web", "eu"}, Channel: "stable"},
		"b": {Tags: []string{"web"}, Channel: "edge"},
		"c": {Tags: []string{"db"}, Channel: "stable"},
	}
	str := func(s string) *string { return &s }
	tests := []struct {
		name string
		sel  Selector
		want []string
	}{
		{name: "empty matches nothing", sel: Selector{}, want: []string{}},
		{name: "all", sel: Selector{All: true}, want: []string{"a", "b", "c"}},
		{name: "tags are all-of", sel: Selector{Tags: []string{"web", "eu"}}, want: []string{"a"}},
		{name: "tagsAny is any-of", sel: Selector{TagsAny: []string{"eu", "db"}}, want: []string{"a", "c"}},
		{name: "hosts", sel: Selector{Hosts: []string{"b", "zz"}}, want: []string{"b"}},
		{name: "channel", sel: Selector{Channel: str("edge")}, want: []string{"b"}},
		{name: "rules OR together", sel: Selector{Channel: str("edge"), Tags: []string{"db"}}, want: []string{"b", "c"}},
		{name: "empty channel is no rule", sel: Selector{Channel: str("")}, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, tt.sel.Resolve(hosts)); diff != "" {
				t.Fatalf("Resolve (-want +got):\n%s", diff)
			}
			if tt.sel.IsEmpty() != (len(tt.want) == 0 && !tt.sel.All) {
				t.Fatalf("IsEmpty = %v", tt.sel.IsEmpty())
			}
		})
	}
	if !(Selector{Tags: []string{"b", "a", "a"}}).Equal(Selector{Tags: []string{"a", "b"}}) {
		t.Error("selectors with the same tags in another order must be equal")
	}
	if (Selector{Tags: []string{"a"}}).Equal(Selector{TagsAny: []string{"a"}}) {
		t.Error("tags and tagsAny must not be equal")
	}
	if !(Selector{Channel: str("")}).Equal(Selector{}) {
		t.Error("an empty channel equals no channel")
	}
}

func TestSelectorUsesCombinators(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		`{"all":true}`:                     false,
		`{"all":true,"and":[],"not":null}`: false,
		`{"and":[ ],"not": null}`:          false,
		`{"and":[{"tags":["a"]}]}`:         true,
		`{"not":{}}`:                       true,
		`{"not":{"tags":["a"]}}`:           true,
		`{"and":"[]"}`:                     true,
		`{"and":{}}`:                       true,
	} {
		f, err := DecodeFleetResolved([]byte(`{"disruptionBudgets":[{"selector":` + in + `}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := f.DisruptionBudgets[0].Selector.UsesCombinators(); got != want {
			t.Errorf("%s: UsesCombinators = %v, want %v", in, got, want)
		}
	}
}

func TestSelectorResolveNamedHosts(t *testing.T) {
	t.Parallel()
	hosts := map[string]Host{"a": {Tags: []string{"x"}}, "b": {}, "c": {Tags: []string{"x"}}}
	sel := Selector{Hosts: []string{"b", "zz", "b", "a"}, Tags: []string{"x"}}
	if diff := cmp.Diff([]string{"a", "b", "c"}, sel.Resolve(hosts)); diff != "" {
		t.Fatalf("Resolve (-want +got):\n%s", diff)
	}
}
