package jsonscan

import (
	"errors"
	"strings"
	"testing"
)

func TestScan(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		wantErr   string // substring; empty means accepted
		canonical bool
	}{
		{name: "empty object", in: `{}`, canonical: true},
		{name: "sorted members", in: `{"a":1,"b":[true,false,null],"c":"x"}`, canonical: true},
		{name: "whitespace", in: "{ \"a\": 1 }", canonical: false},
		{name: "trailing newline", in: "{}\n", canonical: false},
		{name: "unsorted members", in: `{"b":1,"a":2}`, canonical: false},
		{name: "utf16 order puts astral before private use", in: "{\"\U0001F600\":1,\"\uE000\":2}", canonical: true},
		{name: "byte order is not utf16 order", in: "{\"\uE000\":2,\"\U0001F600\":1}", canonical: false},
		{name: "prefix sorts first", in: `{"a":1,"ab":2}`, canonical: true},
		{name: "short escapes are canonical", in: `["\"\\\b\f\n\r\t"]`, canonical: true},
		{name: "lowercase control escape", in: `["\u001f"]`, canonical: true},
		{name: "uppercase control escape", in: `["\u001F"]`, canonical: false},
		{name: "escaped letter", in: `["\u0041"]`, canonical: false},
		{name: "escaped newline in long form", in: `["\u000a"]`, canonical: false},
		{name: "escaped solidus", in: `["\/"]`, canonical: false},
		{name: "surrogate pair", in: `["\ud83d\ude00"]`, canonical: false},
		{name: "raw astral", in: "[\"\U0001F600\"]", canonical: true},
		{name: "integer", in: `[0,-1,123456789012345]`, canonical: true},
		{name: "long integer", in: `[1234567890123456]`, canonical: false},
		{name: "minus zero", in: `[-0]`, canonical: false},
		{name: "fraction", in: `[1.5]`, canonical: false},
		{name: "exponent", in: `[1e2]`, canonical: false},
		{name: "top-level scalar", in: `"x"`, canonical: true},
		{name: "deep but allowed", in: strings.Repeat("[", 8) + strings.Repeat("]", 8), canonical: true},

		{name: "empty", in: ``, wantErr: "unexpected end of input"},
		{name: "duplicate adjacent", in: `{"a":1,"a":2}`, wantErr: "duplicate member name"},
		{name: "duplicate apart", in: `{"b":1,"a":2,"b":3}`, wantErr: "duplicate member name"},
		{name: "duplicate through escape", in: `{"a":1,"\u0061":2}`, wantErr: "duplicate member name"},
		{name: "duplicate nested", in: `{"x":{"k":1,"k":1}}`, wantErr: "duplicate member name"},
		{name: "same name in sibling objects is fine", in: `[{"k":1},{"k":2}]`, canonical: true},
		{name: "invalid utf8", in: "[\"\xff\"]", wantErr: "invalid UTF-8"},
		{name: "encoded surrogate in utf8", in: "[\"\xed\xa0\x80\"]", wantErr: "invalid UTF-8"},
		{name: "lone high surrogate", in: `["\ud800"]`, wantErr: "unpaired UTF-16 surrogate"},
		{name: "lone low surrogate", in: `["\udc00"]`, wantErr: "unpaired UTF-16 surrogate"},
		{name: "high then letter", in: `["\ud800\u0041"]`, wantErr: "unpaired UTF-16 surrogate"},
		{name: "reversed pair", in: `["\ude00\ud83d"]`, wantErr: "unpaired UTF-16 surrogate"},
		{name: "control char", in: "[\"a\tb\"]", wantErr: "control character"},
		{name: "bad escape", in: `["\x"]`, wantErr: "invalid escape"},
		{name: "short unicode escape", in: `["\u12"]`, wantErr: "invalid \\u escape"},
		{name: "overflow", in: `[1e400]`, wantErr: "overflows a double"},
		{name: "negative overflow", in: `[-1e400]`, wantErr: "overflows a double"},
		{name: "underflow is zero, not an error", in: `[1e-400]`, canonical: false},
		{name: "leading zero", in: `[01]`, wantErr: "expected ',' or ']'"},
		{name: "plus sign", in: `[+1]`, wantErr: "unexpected character"},
		{name: "bare dot", in: `[1.]`, wantErr: "digits expected after '.'"},
		{name: "NaN", in: `[NaN]`, wantErr: "unexpected character"},
		{name: "Infinity", in: `[Infinity]`, wantErr: "unexpected character"},
		{name: "hex", in: `[0x10]`, wantErr: "expected ',' or ']'"},
		{name: "trailing data", in: `{} {}`, wantErr: "unexpected data after"},
		{name: "trailing comma", in: `[1,]`, wantErr: "unexpected character"},
		{name: "trailing comma object", in: `{"a":1,}`, wantErr: "expected a member name"},
		{name: "truncated", in: `{"a":`, wantErr: "unexpected end of input"},
		{name: "bad literal", in: `[tru]`, wantErr: "invalid literal"},
		{name: "too deep", in: strings.Repeat("[", 9) + strings.Repeat("]", 9), wantErr: "nesting deeper than 8"},
		{name: "comment", in: `{/*x*/}`, wantErr: "expected a member name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			canonical, err := Scan([]byte(tt.in), 8)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Scan(%q) error = %v, want containing %q", tt.in, err, tt.wantErr)
				}
				if !errors.Is(err, ErrSyntax) {
					t.Fatalf("error %v does not wrap ErrSyntax", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Scan(%q) = %v", tt.in, err)
			}
			if canonical != tt.canonical {
				t.Fatalf("Scan(%q) canonical = %v, want %v", tt.in, canonical, tt.canonical)
			}
		})
	}
}

func TestCompareUTF16(t *testing.T) {
	t.Parallel()
	// RFC 8785 §3.2.3 sorts by UTF-16 code units; these pairs are ordered.
	ordered := [][2]string{
		{"", "a"},
		{"a", "b"},
		{"a", "aa"},
		{"\u00e9", "\u20ac"},
		{"\U0001F600", "\uE000"},
		{"\U0001F600", "\uFFFF"},
		{"\U0001F600", "\U0001F601"},
		{"\r", "1"},
	}
	for _, p := range ordered {
		if c := CompareUTF16(p[0], p[1]); c >= 0 {
			t.Errorf("CompareUTF16(%q, %q) = %d, want < 0", p[0], p[1], c)
		}
		if c := CompareUTF16(p[1], p[0]); c <= 0 {
			t.Errorf("CompareUTF16(%q, %q) = %d, want > 0", p[1], p[0], c)
		}
	}
	if c := CompareUTF16("\U0001F600", "\U0001F600"); c != 0 {
		t.Errorf("equal strings compare %d", c)
	}
}

func TestCheckCanonicalNumber(t *testing.T) {
	t.Parallel()
	var seen []string
	opts := Options{MaxDepth: 4, CanonicalNumber: func(lit []byte) bool {
		seen = append(seen, string(lit))
		return string(lit) != "1.50"
	}}
	if c, err := Check([]byte(`[1,1.5,1e+30]`), opts); err != nil || !c {
		t.Fatalf("Check = %v, %v; want canonical", c, err)
	}
	if c, err := Check([]byte(`[1.50]`), opts); err != nil || c {
		t.Fatalf("Check = %v, %v; want not canonical", c, err)
	}
	// Short integers never reach the callback.
	if strings.Join(seen, " ") != "1.5 1e+30 1.50" {
		t.Fatalf("callback saw %q", seen)
	}
}

func TestCompact(t *testing.T) {
	t.Parallel()
	in := "{ \"a b\" : [ 1 ,\t\"x \\\" y\\\\\" ] ,\n\"c\":\"\\n \" }\r\n"
	want := `{"a b":[1,"x \" y\\"],"c":"\n "}`
	if _, err := Scan([]byte(in), 4); err != nil {
		t.Fatal(err)
	}
	if got := string(Compact(nil, []byte(in))); got != want {
		t.Fatalf("Compact = %q, want %q", got, want)
	}
}
