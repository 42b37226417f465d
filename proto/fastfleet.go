package proto

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
)

// A 100,000-host fleet.resolved is about 27 MiB, nearly all of it the
// "hosts" object, and encoding/json decodes it at some 30 MB/s: most of
// the time between a push and its first dispatch. decodeFleetFast decodes
// that object with a parser that knows Host, and the rest of the document
// with encoding/json; decodeManifestFast does the same for a manifest's
// "hostSet" (HostWave), a sixth of the size, verified beside the fleet.
//
// It is a shortcut, never a second set of rules: it runs only on input
// whose syntax was checked (DecodeChecked's contract), and gives up
// (returns false, having changed nothing) on anything whose meaning it is
// not sure to share with encoding/json: a member type it does not expect,
// a member name that differs from a field's only in letter case or is not
// ASCII, an error anywhere. The caller then decodes with encoding/json
// alone, whose result or error stands. FuzzDecode checks that both agree
// wherever the shortcut answers.

// fastFleetMin is the size from which the shortcut is tried: below it
// encoding/json is fast enough, and the fallback path is the one used.
const fastFleetMin = 64 << 10

// hostFields are the JSON names of Host's fields.
var hostFields = [...]string{"system", "tags", "channel", "closureHash", "pubkey", "pin"}

// decodeFleetFast decodes data into f, which must be zero, and reports
// whether it did; f is unchanged when it did not.
func decodeFleetFast(data []byte, f *FleetResolved) bool {
	if !reflect.ValueOf(f).Elem().IsZero() {
		return false
	}
	var hosts map[string]Host
	var g FleetResolved
	if !decodeSplit(data, "hosts", func(c *cursor) (ok bool) { hosts, ok = c.hosts(); return ok }, &g) {
		return false
	}
	g.Hosts = hosts
	*f = g
	return true
}

// decodeManifestFast is decodeFleetFast for a rollout manifest, whose
// bulk is "hostSet" (a 100,000-host channel's is some 6 MB).
func decodeManifestFast(data []byte, m *RolloutManifest) bool {
	if !reflect.ValueOf(m).Elem().IsZero() {
		return false
	}
	var set []HostWave
	var g RolloutManifest
	if !decodeSplit(data, "hostSet", func(c *cursor) (ok bool) { set, ok = c.hostSet(); return ok }, &g) {
		return false
	}
	g.HostSet = set
	*m = g
	return true
}

// decodeSplit decodes the object data into rest with encoding/json, but
// for the member called name: parse reads its value at the cursor, and
// rest sees null in its place. It reports false when the member is missing
// or given twice, when a member's name folds to name, when parse fails, or
// when encoding/json refuses the rest.
func decodeSplit(data []byte, name string, parse func(*cursor) bool, rest any) bool {
	c := cursor{b: data}
	if !c.expect('{') {
		return false
	}
	from, to := -1, -1
	for more := c.peek() != '}'; more; {
		member, ok := c.str()
		if !ok || !c.expect(':') {
			return false
		}
		switch {
		case member == name:
			if from >= 0 {
				return false
			}
			c.ws()
			from = c.i
			if !parse(&c) {
				return false
			}
			to = c.i
		case foldsTo(member, name):
			return false
		default:
			c.skip()
		}
		if more, ok = c.next('}'); !ok {
			return false
		}
	}
	if !c.ok() || from < 0 || !c.end() {
		return false
	}
	b := make([]byte, 0, len(data)-(to-from)+4)
	b = append(append(append(b, data[:from]...), "null"...), data[to:]...)
	return json.Unmarshal(b, rest) == nil
}

// foldsTo reports whether encoding/json could match a member called name
// to a field called field although name is not field: it differs in
// letter case, or is not ASCII (Unicode case folding is left to the
// fallback).
func foldsTo(name, field string) bool {
	if name == field {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			return true
		}
	}
	return strings.EqualFold(name, field)
}

// hosts decodes the value of "hosts": null or an object of Host.
func (c *cursor) hosts() (map[string]Host, bool) {
	if c.null() {
		return nil, true
	}
	if !c.expect('{') {
		return nil, false
	}
	// An entry of a fleet CI signs takes about 275 bytes: sized so, a map
	// of CI's fleet never grows while it fills (a growing map of 100,000
	// hosts moved every entry again: a third of the decode's time). The
	// hint is bounded by the body's size, itself bounded by MaxBytes.
	hint := (len(c.b) - c.i) / 256
	m := make(map[string]Host, hint)
	if c.peek() == '}' {
		c.i++
		return m, true
	}
	in, sl := interner{}, slab{}
	for {
		name, ok := c.str()
		if !ok || !c.expect(':') {
			return nil, false
		}
		var h Host
		if !c.null() && !c.host(&h, &in, &sl) {
			return nil, false
		}
		m[name] = h
		more, ok := c.next('}')
		switch {
		case !ok:
			return nil, false
		case !more:
			return m, true
		}
	}
}

// host decodes one Host object.
func (c *cursor) host(h *Host, in *interner, sl *slab) bool {
	if !c.expect('{') {
		return false
	}
	if c.peek() == '}' {
		c.i++
		return true
	}
	for {
		name, ok := c.str()
		if !ok || !c.expect(':') {
			return false
		}
		switch name {
		case "system":
			ok = c.plain(&h.System, in)
		case "channel":
			ok = c.plain(&h.Channel, in)
		case "closureHash":
			h.ClosureHash, ok = c.optional(sl)
		case "pubkey":
			h.Pubkey, ok = c.optional(sl)
		case "tags":
			h.Tags, ok = c.tags(in)
		case "pin":
			c.ws()
			from := c.i
			c.skip()
			ok = c.ok() && json.Unmarshal(c.b[from:c.i], &h.Pin) == nil
		default:
			for _, f := range hostFields {
				if foldsTo(name, f) {
					return false
				}
			}
			c.skip()
		}
		if !ok || !c.ok() {
			return false
		}
		if more, ok := c.next('}'); !more {
			return ok
		}
	}
}

// hostWaveFields are the JSON names of HostWave's fields.
var hostWaveFields = [...]string{"hostname", "targetClosure", "waveIndex"}

// hostSet decodes the value of "hostSet": null or an array of HostWave.
func (c *cursor) hostSet() ([]HostWave, bool) {
	if c.null() {
		return nil, true
	}
	if !c.expect('[') {
		return nil, false
	}
	// An entry of a manifest CI signs takes about 60 bytes.
	set := make([]HostWave, 0, (len(c.b)-c.i)/64)
	if c.peek() == ']' {
		c.i++
		return set, true
	}
	for {
		var h HostWave
		if !c.null() && !c.hostWave(&h) {
			return nil, false
		}
		set = append(set, h)
		more, ok := c.next(']')
		switch {
		case !ok:
			return nil, false
		case !more:
			return set, true
		}
	}
}

// hostWave decodes one HostWave object.
func (c *cursor) hostWave(h *HostWave) bool {
	if !c.expect('{') {
		return false
	}
	if c.peek() == '}' {
		c.i++
		return true
	}
	for {
		name, ok := c.str()
		if !ok || !c.expect(':') {
			return false
		}
		switch name {
		case "hostname":
			ok = c.plain(&h.Hostname, nil)
		case "targetClosure":
			ok = c.plain(&h.TargetClosure, nil)
		case "waveIndex":
			ok = c.integer(&h.WaveIndex)
		default:
			for _, f := range hostWaveFields {
				if foldsTo(name, f) {
					return false
				}
			}
			c.skip()
		}
		if !ok || !c.ok() {
			return false
		}
		if more, ok := c.next('}'); !more {
			return ok
		}
	}
}

// integer decodes an int member; null leaves v as it is. Only a plain
// integer of at most 18 digits is taken: a fraction or an exponent (which
// encoding/json refuses for an int, or not) is left to the fallback.
func (c *cursor) integer(v *int) bool {
	if c.null() {
		return true
	}
	c.ws()
	start := c.i
	if c.i < len(c.b) && c.b[c.i] == '-' {
		c.i++
	}
	digits := c.i
	for c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
		c.i++
	}
	if n := c.i - digits; n == 0 || n > 18 || c.i < len(c.b) && literal(c.b[c.i]) {
		c.fail()
		return false
	}
	x, err := strconv.Atoi(string(c.b[start:c.i]))
	if err != nil {
		c.fail()
		return false
	}
	*v = x
	return true
}

// plain decodes a string member into s; null leaves s as it is, as
// encoding/json does.
func (c *cursor) plain(s *string, in *interner) bool {
	if c.null() {
		return true
	}
	v, ok := c.strWith(in)
	if ok {
		*s = v
	}
	return ok
}

// optional decodes a *string member: null is nil.
func (c *cursor) optional(sl *slab) (*string, bool) {
	if c.null() {
		return nil, true
	}
	v, ok := c.str()
	if !ok {
		return nil, false
	}
	return sl.place(v), true
}

// tags decodes a []string member: null is nil, [] an empty slice, a null
// element "".
func (c *cursor) tags(in *interner) ([]string, bool) {
	if c.null() {
		return nil, true
	}
	if !c.expect('[') {
		return nil, false
	}
	tags := []string{}
	if c.peek() == ']' {
		c.i++
		return tags, true
	}
	for {
		var t string
		if !c.null() {
			v, ok := c.strWith(in)
			if !ok {
				return nil, false
			}
			t = v
		}
		tags = append(tags, t)
		more, ok := c.next(']')
		switch {
		case !ok:
			return nil, false
		case !more:
			return tags, true
		}
	}
}

// interner shares the strings that repeat across hosts (systems,
// channels, tags) instead of keeping a copy per host. It keeps at most
// internMax of them.
type interner map[string]string

const internMax = 4096

func (in interner) get(b []byte) string {
	if s, ok := in[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(in) < internMax {
		in[s] = s
	}
	return s
}

// slab hands out pointers to strings from shared chunks: one allocation
// for many of Host's optional members instead of one each.
type slab struct{ free []string }

const slabChunk = 4096

// place returns a pointer to a copy of v.
func (sl *slab) place(v string) *string {
	if len(sl.free) == cap(sl.free) {
		sl.free = make([]string, 0, slabChunk)
	}
	sl.free = append(sl.free, v)
	return &sl.free[len(sl.free)-1]
}

// cursor reads JSON whose syntax was checked; a position past the end
// marks a failure.
type cursor struct {
	b []byte
	i int
}

func (c *cursor) ok() bool { return c.i <= len(c.b) }

func (c *cursor) fail() { c.i = len(c.b) + 1 }

func (c *cursor) ws() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// peek returns the next byte that is not white space, 0 at the end.
func (c *cursor) peek() byte {
	c.ws()
	if c.i < len(c.b) {
		return c.b[c.i]
	}
	return 0
}

func (c *cursor) expect(b byte) bool {
	if c.peek() == b {
		c.i++
		return true
	}
	c.fail()
	return false
}

// end reports whether only white space is left.
func (c *cursor) end() bool {
	c.ws()
	return c.i == len(c.b)
}

// next passes the comma between two members or elements, or the byte
// that closes them, and reports whether another follows.
func (c *cursor) next(closing byte) (more, ok bool) {
	switch c.peek() {
	case ',':
		c.i++
		return true, true
	case closing:
		c.i++
		return false, true
	}
	c.fail()
	return false, false
}

// null consumes a null literal if one is next.
func (c *cursor) null() bool {
	if c.peek() == 'n' && len(c.b)-c.i >= 4 && string(c.b[c.i:c.i+4]) == "null" {
		c.i += 4
		return true
	}
	return false
}

func (c *cursor) str() (string, bool) { return c.strWith(nil) }

// strWith reads a string literal. One of printable ASCII without escapes
// is taken as it is (interned when in is not nil); any other is decoded
// by encoding/json.
func (c *cursor) strWith(in *interner) (string, bool) {
	if c.peek() != '"' {
		c.fail()
		return "", false
	}
	start := c.i
	c.i++
	end := bytes.IndexByte(c.b[c.i:], '"')
	if end < 0 {
		c.fail()
		return "", false
	}
	if raw := c.b[c.i : c.i+end]; printableASCII(raw) && bytes.IndexByte(raw, '\\') < 0 {
		c.i += end + 1
		if in != nil {
			return in.get(raw), true
		}
		return string(raw), true
	}
	c.i--
	c.skipString()
	if !c.ok() {
		return "", false
	}
	var s string
	if json.Unmarshal(c.b[start:c.i], &s) != nil {
		c.fail()
		return "", false
	}
	return s, true
}

// printableASCII reports whether b holds only bytes from 0x20 to 0x7f, a
// word at a time: a byte below 0x20 borrows into its top bit when 0x20 is
// subtracted, a byte from 0x80 has it already.
func printableASCII(b []byte) bool {
	const lows, highs = 0x2020202020202020, 0x8080808080808080
	for len(b) >= 8 {
		// One load: the compiler merges the bytes' shifts.
		w := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
			uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
		if ((w-lows)|w)&highs != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

// skipString passes over a string literal, which must be next.
func (c *cursor) skipString() {
	for c.i++; c.i < len(c.b); c.i++ {
		switch c.b[c.i] {
		case '"':
			c.i++
			return
		case '\\':
			c.i++
		}
	}
	c.fail()
}

// skip passes over one value of any type.
func (c *cursor) skip() {
	switch c.peek() {
	case '"':
		c.skipString()
	case '{', '[':
		depth := 0
		for c.i < len(c.b) {
			switch c.b[c.i] {
			case '"':
				c.skipString()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					c.i++
					return
				}
			}
			c.i++
		}
		c.fail()
	case 0:
		c.fail()
	default:
		for c.i < len(c.b) && literal(c.b[c.i]) {
			c.i++
		}
	}
}

// literal reports whether b may appear in a number, true, false or null.
func literal(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '+' || b == '.' || b == 'E'
}
