package cliapp

import (
	"bytes"
	"strconv"
	"strings"
	"unicode/utf8"
)

// keyLines finds the line of every key of a TOML document, by its path
// (keyPath): table headers, the elements of arrays of tables (path[i], at
// the line of their header), keys, the tables their dotted parts make (at
// the first line that names them), and the elements of arrays (path[i]).
// BurntSushi/toml keeps one position per key name, so the keys of the
// second element of an array of tables would all point at the last one:
// this scan tells them apart. It reads only as much of TOML's syntax as it
// must to find keys (strings, comments, arrays, inline tables); run on a
// document that did not decode, its result means nothing. A byte order
// mark at the start is passed over, as the decoder does.
func keyLines(data []byte) map[string]int {
	for _, bom := range [][]byte{{0xef, 0xbb, 0xbf}, {0xff, 0xfe}, {0xfe, 0xff}} {
		if bytes.HasPrefix(data, bom) {
			data = data[len(bom):]
			break
		}
	}
	s := &lineScanner{data: data, line: 1, lines: map[string]int{}, arrays: map[string]int{}}
	s.document()
	return s.lines
}

// keyPath appends a key to a path: parts joined by ".", each a bare key
// as written or, if it is not one, a quoted Go string; "[i]" after an
// array's path names its element i.
func keyPath(path, part string) string {
	if !bareKey(part) {
		part = strconv.Quote(part)
	}
	if path == "" {
		return part
	}
	return path + "." + part
}

// elemPath is the path of element i of the array at path.
func elemPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func bareKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

type lineScanner struct {
	data  []byte
	i     int
	line  int
	lines map[string]int
	// arrays counts the elements of each array of tables so far.
	arrays map[string]int
}

func (s *lineScanner) peek(k int) byte {
	if s.i+k < len(s.data) {
		return s.data[s.i+k]
	}
	return 0
}

func (s *lineScanner) more() bool { return s.i < len(s.data) }

// mark records the line of a path the first time it is named.
func (s *lineScanner) mark(path string, line int) {
	if _, ok := s.lines[path]; !ok {
		s.lines[path] = line
	}
}

// skip passes white space and comments, and newlines when asked.
func (s *lineScanner) skip(newlines bool) {
	for s.more() {
		switch c := s.data[s.i]; {
		case c == ' ' || c == '\t' || c == '\r':
			s.i++
		case c == '\n' && newlines:
			s.i++
			s.line++
		case c == '#':
			for s.more() && s.data[s.i] != '\n' {
				s.i++
			}
		default:
			return
		}
	}
}

func (s *lineScanner) spaces() {
	for s.more() && (s.data[s.i] == ' ' || s.data[s.i] == '\t') {
		s.i++
	}
}

func (s *lineScanner) document() {
	table := ""
	for {
		s.skip(true)
		if !s.more() {
			return
		}
		start, line := s.i, s.line
		if s.data[s.i] == '[' {
			array := s.peek(1) == '['
			s.i++
			if array {
				s.i++
			}
			parts := s.key()
			s.spaces()
			if s.peek(0) != ']' {
				return
			}
			s.i++
			if array {
				s.i++
			}
			table = s.header(parts, array, line)
			continue
		}
		parts := s.key()
		s.spaces()
		if len(parts) == 0 || s.peek(0) != '=' {
			return // not TOML after all
		}
		s.i++
		s.value(s.define(table, parts, line))
		if s.i == start {
			return
		}
	}
}

// header records a table header ([a.b], or [[a.b]] for a new element of
// an array of tables) and returns the path of the table it opens.
func (s *lineScanner) header(parts []string, array bool, line int) string {
	path := ""
	for i, p := range parts {
		path = keyPath(path, p)
		s.mark(path, line)
		if array && i == len(parts)-1 {
			n := s.arrays[path]
			s.arrays[path] = n + 1
			path = elemPath(path, n)
			s.lines[path] = line
		} else if n, ok := s.arrays[path]; ok {
			path = elemPath(path, n-1) // [[a]] … [a.b]: b of a's last element
		}
	}
	return path
}

// define records a key (dotted parts) of the table at path.
func (s *lineScanner) define(path string, parts []string, line int) string {
	for _, p := range parts {
		path = keyPath(path, p)
		s.mark(path, line)
	}
	return path
}

// key reads a key's dotted parts, up to what follows it.
func (s *lineScanner) key() []string {
	var parts []string
	for {
		s.spaces()
		if !s.more() {
			return parts
		}
		switch c := s.data[s.i]; c {
		case '"', '\'':
			parts = append(parts, s.quotedKey(c))
		default:
			start := s.i
			for s.more() && !strings.ContainsRune(" \t\r\n.=[]#\"',{}", rune(s.data[s.i])) {
				s.i++
			}
			if s.i == start {
				return parts
			}
			parts = append(parts, string(s.data[start:s.i]))
		}
		s.spaces()
		if s.peek(0) != '.' {
			return parts
		}
		s.i++
	}
}

// quotedKey reads a quoted key part, the quote at s.i.
func (s *lineScanner) quotedKey(q byte) string {
	s.i++
	start := s.i
	for s.more() && s.data[s.i] != q && s.data[s.i] != '\n' {
		if q == '"' && s.data[s.i] == '\\' {
			s.i++
		}
		s.i++
	}
	raw := string(s.data[start:min(s.i, len(s.data))])
	if s.more() && s.data[s.i] == q {
		s.i++
	}
	if q == '\'' {
		return raw
	}
	return unescapeBasic(raw)
}

// value passes a value, recording the elements of arrays and the keys of
// inline tables under path.
func (s *lineScanner) value(path string) {
	s.spaces()
	if !s.more() {
		return
	}
	switch s.data[s.i] {
	case '"', '\'':
		s.str()
	case '[':
		s.i++
		s.array(path)
	case '{':
		s.i++
		s.inline(path)
	default:
		for s.more() && !strings.ContainsRune(",]}\n#", rune(s.data[s.i])) {
			s.i++
		}
	}
}

func (s *lineScanner) array(path string) {
	for n := 0; ; n++ {
		s.skip(true)
		if !s.more() {
			return
		}
		if s.data[s.i] == ']' {
			s.i++
			return
		}
		start := s.i
		p := elemPath(path, n)
		s.mark(p, s.line)
		s.value(p)
		s.skip(true)
		if s.peek(0) == ',' {
			s.i++
		} else if s.i == start {
			return // lost
		}
	}
}

func (s *lineScanner) inline(path string) {
	for {
		s.skip(true) // TOML 1.1: newlines and comments in inline tables
		if !s.more() {
			return
		}
		if s.data[s.i] == '}' {
			s.i++
			return
		}
		start, line := s.i, s.line
		parts := s.key()
		s.spaces()
		if len(parts) == 0 || s.peek(0) != '=' {
			return
		}
		s.i++
		s.value(s.define(path, parts, line))
		s.skip(true)
		if s.peek(0) == ',' {
			s.i++
		} else if s.i == start {
			return
		}
	}
}

// str passes a string of any of TOML's four kinds, the quote at s.i.
func (s *lineScanner) str() {
	q := s.data[s.i]
	if s.peek(1) == q && s.peek(2) == q {
		s.i += 3
		for s.more() {
			c := s.data[s.i]
			switch {
			case c == '\\' && q == '"':
				s.i++
				if s.more() && s.data[s.i] == '\n' {
					s.line++
				}
				s.i++
			case c == '\n':
				s.line++
				s.i++
			case c == q && s.peek(1) == q && s.peek(2) == q:
				s.i += 3
				for k := 0; k < 2 && s.peek(0) == q; k++ {
					s.i++ // up to two quotes before the closing ones are content
				}
				return
			default:
				s.i++
			}
		}
		return
	}
	s.i++
	for s.more() {
		switch c := s.data[s.i]; {
		case c == '\\' && q == '"':
			s.i += 2
		case c == q:
			s.i++
			return
		case c == '\n':
			return
		default:
			s.i++
		}
	}
}

var (
	simpleEscapes = map[byte]string{'b': "\b", 't': "\t", 'n': "\n", 'f': "\f", 'r': "\r", 'e': "\x1b", '"': `"`, '\\': `\`}
	hexEscapes    = map[byte]int{'x': 2, 'u': 4, 'U': 8}
)

// unescapeBasic decodes the escapes of a basic string; raw as it is if one
// is not valid.
func unescapeBasic(raw string) string {
	if !strings.Contains(raw, `\`) {
		return raw
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(raw) {
			return raw
		}
		if r, ok := simpleEscapes[raw[i]]; ok {
			b.WriteString(r)
			continue
		}
		digits := hexEscapes[raw[i]]
		if digits == 0 || i+1+digits > len(raw) {
			return raw
		}
		n, err := strconv.ParseUint(raw[i+1:i+1+digits], 16, 32)
		if err != nil || !utf8.ValidRune(rune(n)) {
			return raw
		}
		b.WriteRune(rune(n))
		i += digits
	}
	return b.String()
}
