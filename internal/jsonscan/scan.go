package jsonscan

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax is wrapped by every error Scan returns, so callers can classify
// them with errors.Is without depending on *Error.
var ErrSyntax = errors.New("invalid JSON")

// Error describes the first problem Scan found and where.
type Error struct {
	// Offset is the byte offset in the input where the problem was detected.
	Offset int
	// Reason is a short lowercase description.
	Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("%s at byte %d", e.Reason, e.Offset) }

// Unwrap makes errors.Is(err, ErrSyntax) true.
func (e *Error) Unwrap() error { return ErrSyntax }

// Scan checks data as described in the package documentation. maxDepth
// bounds the nesting of objects and arrays (a top-level object is depth 1).
// It reports whether data is already canonical JCS; that result is
// meaningful only when err is nil.
func Scan(data []byte, maxDepth int) (canonical bool, err error) {
	return Check(data, Options{MaxDepth: maxDepth})
}

// Options configure Check.
type Options struct {
	// MaxDepth bounds the nesting of objects and arrays (a top-level object
	// is depth 1).
	MaxDepth int
	// Schema, when set, is consulted for member names.
	Schema Schema
	// CanonicalNumber, when set, decides whether a number literal other
	// than a short integer is in its canonical form. Without it such
	// numbers make the document "not known canonical".
	CanonicalNumber func(lit []byte) bool
}

// Schema guides Check through a document whose shape is partly known,
// so that member names can be checked against the fields a decoder will
// bind them to. A nil Schema accepts anything below it. Where the document's
// shape differs from the schema (an array where an object was expected),
// the schema is simply not consulted: type errors are the decoder's job.
type Schema interface {
	// Member is called for every member of an object the schema describes.
	// It returns the schema of the member's value, or an error that
	// rejects the name.
	Member(name []byte) (Schema, error)
	// Elem returns the schema of the elements of an array.
	Elem() Schema
}

// Check is Scan with options.
func Check(data []byte, opts Options) (canonical bool, err error) {
	s := scanner{data: data, maxDepth: opts.MaxDepth, canonicalNumber: opts.CanonicalNumber, canonical: true}
	if err := s.value(0, opts.Schema); err != nil {
		return false, err
	}
	s.skipSpace()
	if s.i != len(s.data) {
		return false, s.fail("unexpected data after the top-level value")
	}
	return s.canonical, nil
}

type scanner struct {
	data            []byte
	i               int
	maxDepth        int
	canonicalNumber func([]byte) bool
	canonical       bool
	// keys[d] holds the decoded member names of the object open at depth d;
	// the slices are reused between objects to keep allocation flat.
	keys [][][]byte
}

func (s *scanner) fail(format string, args ...any) error {
	return &Error{Offset: s.i, Reason: fmt.Sprintf(format, args...)}
}

func (s *scanner) skipSpace() {
	start := s.i
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			if s.i != start {
				s.canonical = false
			}
			return
		}
	}
	if s.i != start {
		s.canonical = false
	}
}

func (s *scanner) value(depth int, schema Schema) error {
	s.skipSpace()
	if s.i >= len(s.data) {
		return s.fail("unexpected end of input")
	}
	switch c := s.data[s.i]; {
	case c == '{':
		return s.object(depth+1, schema)
	case c == '[':
		return s.array(depth+1, schema)
	case c == '"':
		_, err := s.str(false)
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || isDigit(c):
		return s.number()
	default:
		return s.fail("unexpected character %q", c)
	}
}

func (s *scanner) literal(lit string) error {
	if !bytes.HasPrefix(s.data[s.i:], []byte(lit)) {
		return s.fail("invalid literal, expected %s", lit)
	}
	s.i += len(lit)
	return nil
}

func (s *scanner) enter(depth int) error {
	if depth > s.maxDepth {
		return s.fail("nesting deeper than %d levels", s.maxDepth)
	}
	return nil
}

func (s *scanner) array(depth int, schema Schema) error {
	if err := s.enter(depth); err != nil {
		return err
	}
	s.i++ // '['
	s.skipSpace()
	if s.i < len(s.data) && s.data[s.i] == ']' {
		s.i++
		return nil
	}
	var elem Schema
	if schema != nil {
		elem = schema.Elem()
	}
	for {
		if err := s.value(depth, elem); err != nil {
			return err
		}
		s.skipSpace()
		if s.i >= len(s.data) {
			return s.fail("unexpected end of input in array")
		}
		switch s.data[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return s.fail("expected ',' or ']' in array")
		}
	}
}

func (s *scanner) object(depth int, schema Schema) error {
	if err := s.enter(depth); err != nil {
		return err
	}
	start := s.i
	s.i++ // '{'
	for len(s.keys) <= depth {
		s.keys = append(s.keys, nil)
	}
	keys := s.keys[depth][:0]
	ordered := true
	defer func() { s.keys[depth] = keys[:0] }()

	s.skipSpace()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.skipSpace()
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return s.fail("expected a member name")
		}
		keyAt := s.i
		key, err := s.str(true)
		if err != nil {
			return err
		}
		if ordered && len(keys) > 0 {
			switch c := compareUTF16(keys[len(keys)-1], key); {
			case c == 0:
				s.i = keyAt
				return s.fail("duplicate member name %q", key)
			case c > 0:
				ordered = false
				s.canonical = false
			}
		}
		keys = append(keys, key)
		var member Schema
		if schema != nil {
			if member, err = schema.Member(key); err != nil {
				return &Error{Offset: keyAt, Reason: err.Error()}
			}
		}
		s.skipSpace()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return s.fail("expected ':' after member name")
		}
		s.i++
		if err := s.value(depth, member); err != nil {
			return err
		}
		s.skipSpace()
		if s.i >= len(s.data) {
			return s.fail("unexpected end of input in object")
		}
		if s.data[s.i] == ',' {
			s.i++
			continue
		}
		if s.data[s.i] != '}' {
			return s.fail("expected ',' or '}' in object")
		}
		s.i++
		break
	}
	if !ordered {
		sorted := slices.Clone(keys)
		slices.SortFunc(sorted, bytes.Compare)
		for k := 1; k < len(sorted); k++ {
			if bytes.Equal(sorted[k-1], sorted[k]) {
				return &Error{Offset: start, Reason: fmt.Sprintf("duplicate member name %q in object", sorted[k])}
			}
		}
	}
	return nil
}

// str scans a string starting at its opening quote. When decode is true it
// returns the unescaped bytes: a sub-slice of the input when the string has
// no escapes, otherwise a fresh copy.
func (s *scanner) str(decode bool) ([]byte, error) {
	s.i++ // opening quote
	start := s.i
	var buf []byte // decoded form, only once an escape has been seen
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			out := s.data[start:s.i]
			if buf != nil {
				out = buf
			}
			s.i++
			return out, nil
		case c == '\\':
			if decode && buf == nil {
				buf = append([]byte(nil), s.data[start:s.i]...)
			}
			r, err := s.escape()
			if err != nil {
				return nil, err
			}
			if decode {
				buf = utf8.AppendRune(buf, r)
			}
		case c < 0x20:
			return nil, s.fail("control character 0x%02x in string", c)
		case c < utf8.RuneSelf:
			if buf != nil {
				buf = append(buf, c)
			}
			s.i++
		default:
			r, size := utf8.DecodeRune(s.data[s.i:])
			if r == utf8.RuneError && size == 1 {
				return nil, s.fail("invalid UTF-8 in string")
			}
			if buf != nil {
				buf = append(buf, s.data[s.i:s.i+size]...)
			}
			s.i += size
		}
	}
	return nil, s.fail("unterminated string")
}

// escape consumes one escape sequence starting at the backslash, including
// the second half of a surrogate pair, and returns the code point.
func (s *scanner) escape() (rune, error) {
	if s.i+1 >= len(s.data) {
		return 0, s.fail("unterminated escape")
	}
	c := s.data[s.i+1]
	s.i += 2
	switch c {
	case '"', '\\':
		return rune(c), nil
	case '/':
		s.canonical = false
		return '/', nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
	default:
		s.i -= 2
		return 0, s.fail("invalid escape \\%c", c)
	}
	at := s.i - 2
	r, lower, ok := s.hex4()
	if !ok {
		s.i = at
		return 0, s.fail("invalid \\u escape")
	}
	// JCS writes \u only for control characters without a short form, in
	// lowercase hex; anything else spelled with \u is not canonical.
	if r >= 0x20 || !lower || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t' {
		s.canonical = false
	}
	switch {
	case utf16.IsSurrogate(r) && r < 0xdc00:
		if s.i+1 < len(s.data) && s.data[s.i] == '\\' && s.data[s.i+1] == 'u' {
			s.i += 2
			lo, _, ok := s.hex4()
			if ok && lo >= 0xdc00 && lo <= 0xdfff {
				return utf16.DecodeRune(r, lo), nil
			}
		}
		s.i = at
		return 0, s.fail("unpaired UTF-16 surrogate")
	case utf16.IsSurrogate(r):
		s.i = at
		return 0, s.fail("unpaired UTF-16 surrogate")
	}
	return r, nil
}

func (s *scanner) hex4() (r rune, lower, ok bool) {
	if s.i+4 > len(s.data) {
		return 0, false, false
	}
	lower = true
	for _, c := range s.data[s.i : s.i+4] {
		var v byte
		switch {
		case isDigit(c):
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			v = c - 'A' + 10
			lower = false
		default:
			return 0, false, false
		}
		r = r<<4 | rune(v)
	}
	s.i += 4
	return r, lower, true
}

// number scans a number per RFC 8259. Only integers of at most 15 digits
// without a minus zero are reported canonical: they are exactly
// representable and ES6 prints them digit for digit. Every other number
// makes the document "not known canonical".
func (s *scanner) number() error {
	start := s.i
	if s.data[s.i] == '-' {
		s.i++
	}
	intStart := s.i
	switch {
	case s.i < len(s.data) && s.data[s.i] == '0':
		s.i++
	case s.i < len(s.data) && s.data[s.i] >= '1' && s.data[s.i] <= '9':
		for s.i < len(s.data) && isDigit(s.data[s.i]) {
			s.i++
		}
	default:
		return s.fail("invalid number")
	}
	digits := s.i - intStart
	plainInt := true
	if s.i < len(s.data) && s.data[s.i] == '.' {
		plainInt = false
		s.i++
		if !s.digits() {
			return s.fail("invalid number: digits expected after '.'")
		}
	}
	if s.i < len(s.data) && (s.data[s.i] == 'e' || s.data[s.i] == 'E') {
		plainInt = false
		s.i++
		if s.i < len(s.data) && (s.data[s.i] == '+' || s.data[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return s.fail("invalid number: digits expected in exponent")
		}
	}
	lit := s.data[start:s.i]
	if plainInt && digits <= 15 {
		if string(lit) == "-0" {
			s.canonical = false
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil && math.IsInf(f, 0) {
		s.i = start
		return s.fail("number %s overflows a double", lit)
	}
	if s.canonical && (s.canonicalNumber == nil || !s.canonicalNumber(lit)) {
		s.canonical = false
	}
	return nil
}

func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.data) && isDigit(s.data[s.i]) {
		s.i++
	}
	return s.i > start
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units,
// the member order RFC 8785 §3.2.3 prescribes. It differs from byte order
// only where a supplementary-plane character meets one in U+E000..U+FFFF.
func compareUTF16(a, b []byte) int {
	for len(a) > 0 && len(b) > 0 {
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			if a[0] != b[0] {
				return int(a[0]) - int(b[0])
			}
			a, b = a[1:], b[1:]
			continue
		}
		ra, na := utf8.DecodeRune(a)
		rb, nb := utf8.DecodeRune(b)
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return int(ua) - int(ub)
			}
			// Same high surrogate: the low surrogates order like the runes.
			return int(ra) - int(rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// Compact appends data to dst without the whitespace outside strings. data
// must be valid JSON (Scan accepted it).
func Compact(dst, data []byte) []byte {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString:
			dst = append(dst, c)
			if c == '\\' && i+1 < len(data) {
				i++
				dst = append(dst, data[i])
			} else if c == '"' {
				inString = false
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			if c == '"' {
				inString = true
			}
			dst = append(dst, c)
		}
	}
	return dst
}

// CompareUTF16 exposes the JCS member order for tests and callers that sort
// names themselves.
func CompareUTF16(a, b string) int { return compareUTF16([]byte(a), []byte(b)) }

func firstUnit(r rune) rune {
	if r >= 0x10000 {
		hi, _ := utf16.EncodeRune(r)
		return hi
	}
	return r
}
