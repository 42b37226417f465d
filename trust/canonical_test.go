package trust

import (
	"bytes"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cyberphone/json-canonicalization/go/src/webpki.org/jsoncanonicalizer"

	"github.com/nixfleet/nixfleet/internal/jsonscan"
)

// cyberphoneTestdata locates the test data shipped inside the cyberphone
// module, at the version go.mod pins.
func cyberphoneTestdata(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cyberphone/json-canonicalization").Output()
	if err != nil {
		t.Fatalf("locating the cyberphone module: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "testdata")
}

// TestCanonicalizeCyberphoneTestdata runs every input/output pair shipped
// with the reference implementation, byte for byte, and checks the
// hexadecimal rendering in outhex/ as well.
func TestCanonicalizeCyberphoneTestdata(t *testing.T) {
	dir := cyberphoneTestdata(t)
	inputs, err := filepath.Glob(filepath.Join(dir, "input", "*.json"))
	if err != nil || len(inputs) < 6 {
		t.Fatalf("expected the module's test inputs, found %v (%v)", inputs, err)
	}
	for _, in := range inputs {
		name := filepath.Base(in)
		t.Run(name, func(t *testing.T) {
			input := readFile(t, in)
			want := readFile(t, filepath.Join(dir, "output", name))
			got, err := Canonicalize(input)
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if !bytes.Equal(got, bytes.TrimRight(want, "\n")) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			hexWant := strings.Join(strings.Fields(string(readFile(t, filepath.Join(dir, "outhex", strings.TrimSuffix(name, ".json")+".txt")))), "")
			if hexGot := hexBytes(got); hexGot != hexWant {
				t.Fatalf("hex mismatch\ngot  %s\nwant %s", hexGot, hexWant)
			}
			again, err := Canonicalize(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("canonical output does not re-canonicalize to itself: %s, %v", again, err)
			}
		})
	}
}

func hexBytes(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteString(strconv.FormatUint(uint64(c)|0x100, 16)[1:])
	}
	return sb.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCanonicalizeRFC8785 checks the examples of RFC 8785: the §3.2.2
// sample, the §3.2.3 sorting sample, and the number serialization table of
// Appendix B (IEEE 754 bit patterns and their expected text).
func TestCanonicalizeRFC8785(t *testing.T) {
	t.Parallel()
	samples := []struct{ name, in, want string }{
		{
			name: "3.2.2 sample",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "3.2.3 sorting sample",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\"," +
				"\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
	}
	for _, s := range samples {
		got, err := Canonicalize([]byte(s.in))
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if string(got) != s.want {
			t.Errorf("%s:\ngot  %s\nwant %s", s.name, got, s.want)
		}
	}

	numbers := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4340000000000001, "9007199254740994"},
		{0x4340000000000002, "9007199254740996"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, n := range numbers {
		f := math.Float64frombits(n.bits)
		in := "[" + strconv.FormatFloat(f, 'g', -1, 64) + "]"
		got, err := Canonicalize([]byte(in))
		if err != nil {
			t.Errorf("%016x: %v", n.bits, err)
			continue
		}
		if string(got) != "["+n.want+"]" {
			t.Errorf("%016x (%s): got %s, want [%s]", n.bits, in, got, n.want)
		}
	}
	// NaN and the infinities have no JSON spelling; a literal that
	// overflows to infinity must be refused, never serialised as null.
	for _, in := range []string{`[1e309]`, `[-1e400]`, `[NaN]`, `[Infinity]`} {
		if out, err := Canonicalize([]byte(in)); err == nil || out != nil {
			t.Errorf("Canonicalize(%s) = %s, %v; want an error and no output", in, out, err)
		}
	}
}

// TestCanonicalizeUTF16Order covers member order by UTF-16 code units with
// astral-plane names, where it differs from code point (and UTF-8 byte)
// order.
func TestCanonicalizeUTF16Order(t *testing.T) {
	t.Parallel()
	in := "{\"\uffff\":1,\"\U00010000\":2,\"\ue000\":3,\"\U0010ffff\":4,\"\ud7ff\":5,\"a\":6}"
	want := "{\"a\":6,\"\ud7ff\":5,\"\U00010000\":2,\"\U0010ffff\":4,\"\ue000\":3,\"\uffff\":1}"
	got, err := Canonicalize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	ref, err := jsoncanonicalizer.Transform([]byte(in))
	if err != nil || !bytes.Equal(ref, got) {
		t.Fatalf("reference implementation disagrees: %q, %v", ref, err)
	}
	// Already in UTF-16 order: the fast path must recognise it.
	if canonical, err := jsonscan.Scan([]byte(want), 8); err != nil || !canonical {
		t.Fatalf("scanner does not see the sorted form as canonical: %v, %v", canonical, err)
	}
}

// TestCanonicalizeRejects covers the guard around the reference
// implementation: each of these inputs is refused with ErrMalformed and
// no output at all, although the reference would serialise some of them.
func TestCanonicalizeRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		// reference reports whether the cyberphone code alone accepts it,
		// documenting why the guard exists.
		reference bool
	}{
		{name: "invalid utf-8", in: "{\"a\":\"\xc3\x28\"}", reference: true},
		{name: "utf-8 encoded surrogate", in: "{\"a\":\"\xed\xa0\x80\"}", reference: true},
		{name: "lone high surrogate", in: `{"a":"\ud800"}`},
		{name: "lone high surrogate before a letter", in: `{"a":"\ud800\u0041"}`, reference: true},
		{name: "lone low surrogate", in: `{"a":"\udc00x"}`},
		{name: "duplicate member", in: `{"a":1,"a":2}`},
		{name: "duplicate after unescaping", in: `{"a":1,"\u0061":2}`},
		{name: "non-finite number", in: `{"a":1e999}`},
		{name: "hexadecimal number", in: `{"a":0x10}`},
		{name: "hexadecimal float", in: `{"a":0x1p4}`, reference: true},
		{name: "infinity word", in: `{"a":Inf}`},
		{name: "leading plus", in: `{"a":+1}`, reference: true},
		{name: "leading zero", in: `{"a":01}`, reference: true},
		{name: "trailing data", in: `{"a":1} {"b":2}`},
		{name: "trailing comma", in: `{"a":1,}`},
		{name: "top-level scalar", in: `"a"`},
		{name: "empty", in: ``},
		{name: "too deep", in: strings.Repeat("[", 40) + strings.Repeat("]", 40), reference: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := Canonicalize([]byte(tt.in))
			if !errors.Is(err, ErrMalformed) || out != nil {
				t.Fatalf("Canonicalize = %q, %v; want nil, ErrMalformed", out, err)
			}
			if _, refErr := jsoncanonicalizer.Transform([]byte(tt.in)); (refErr == nil) != tt.reference {
				t.Fatalf("reference accepts = %v, test table says %v", refErr == nil, tt.reference)
			}
		})
	}
}

// TestCanonicalizeFastPath checks that canonical input is passed through
// (not re-serialised) and that the reference agrees it is canonical.
func TestCanonicalizeFastPath(t *testing.T) {
	t.Parallel()
	in := []byte(`{"a":[1,-2,"x\n\u001f"],"b":{"c":null,"d":true}}`)
	out, err := Canonicalize(in)
	if err != nil {
		t.Fatal(err)
	}
	if &out[0] != &in[0] {
		t.Fatal("canonical input was copied; the fast path did not apply")
	}
	ref, err := jsoncanonicalizer.Transform(in)
	if err != nil || !bytes.Equal(ref, in) {
		t.Fatalf("reference output %s, %v differs", ref, err)
	}

	// Numbers in their ES6 form are canonical too.
	nums := []byte(`[1.5,1e+30,-0.000001,5e-324]`)
	if out, err := Canonicalize(nums); err != nil || &out[0] != &nums[0] {
		t.Fatalf("canonical numbers not passed through: %s, %v", out, err)
	}

	// Pretty-printed canonical JSON is compacted without the reference.
	pretty := []byte("{\n  \"a\": [\n    1,\n    \"x y\"\n  ],\n  \"b\": {}\n}\n")
	out, err = Canonicalize(pretty)
	if err != nil || string(out) != `{"a":[1,"x y"],"b":{}}` {
		t.Fatalf("Canonicalize(pretty) = %s, %v", out, err)
	}
}
