package cliapp

import (
	"bytes"
	"slices"
	"strconv"

	"github.com/pelletier/go-toml/v2/unstable"
)

// keyLines finds the line of every key of a TOML document, by its path
// (keyPath): table headers, the elements of arrays of tables (path[i], at
// the line of their header), keys, the tables their dotted parts make (at
// the first line that names them), and the elements of arrays (path[i], at
// the line where they start). The decoder gives values, not positions, so
// this walks go-toml's syntax tree, which has the position of every key and
// scalar. That tree has none for an array: an array in an array is where
// its first element is, and one with no table or scalar in it anywhere has
// no line (Section.Line falls back to the array holding it). Run on a
// document that did not decode, its result means nothing. A byte order
// mark at the start is passed over, as the decoder does (trimBOM).
func keyLines(data []byte) map[string]int {
	data = trimBOM(data)
	f := &lineFinder{lines: map[string]int{}, arrays: map[string]int{}}
	for i, c := range data {
		if c == '\n' {
			f.newlines = append(f.newlines, i)
		}
	}
	f.p.Reset(data)
	table := ""
	for f.p.NextExpression() {
		switch e := f.p.Expression(); e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table = f.header(e)
		case unstable.KeyValue:
			f.keyValue(table, e)
		}
	}
	return f.lines
}

// trimBOM drops a byte order mark from the start of a document: UTF-8's,
// or UTF-16's, which tools add to UTF-8 files too.
func trimBOM(data []byte) []byte {
	for _, bom := range [][]byte{{0xef, 0xbb, 0xbf}, {0xff, 0xfe}, {0xfe, 0xff}} {
		if bytes.HasPrefix(data, bom) {
			return data[len(bom):]
		}
	}
	return data
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

type lineFinder struct {
	p        unstable.Parser
	newlines []int // the offset of each "\n"
	lines    map[string]int
	// arrays counts the elements of each array of tables so far.
	arrays map[string]int
}

// line is the line of the start of a node's bytes.
func (f *lineFinder) line(n *unstable.Node) int {
	i, _ := slices.BinarySearch(f.newlines, int(n.Raw.Offset))
	return i + 1
}

// mark records the line of a path the first time it is named.
func (f *lineFinder) mark(path string, line int) {
	if _, ok := f.lines[path]; !ok {
		f.lines[path] = line
	}
}

// header records a table header ([a.b], or [[a.b]] for a new element of
// an array of tables) and returns the path of the table it opens.
func (f *lineFinder) header(e *unstable.Node) string {
	path := ""
	for it := e.Key(); it.Next(); {
		k := it.Node()
		line := f.line(k)
		path = keyPath(path, string(k.Data))
		f.mark(path, line)
		if e.Kind == unstable.ArrayTable && it.IsLast() {
			n := f.arrays[path]
			f.arrays[path] = n + 1
			path = elemPath(path, n)
			f.lines[path] = line
		} else if n, ok := f.arrays[path]; ok {
			path = elemPath(path, n-1) // [[a]] … [a.b]: b of a's last element
		}
	}
	return path
}

// keyValue records a key (dotted parts) of the table at path, and what
// its value holds.
func (f *lineFinder) keyValue(path string, e *unstable.Node) {
	for it := e.Key(); it.Next(); {
		path = keyPath(path, string(it.Node().Data))
		f.mark(path, f.line(it.Node()))
	}
	f.value(path, e.Value())
}

// value records the elements of an array and the keys of an inline table
// at path.
func (f *lineFinder) value(path string, v *unstable.Node) {
	switch v.Kind {
	case unstable.Array:
		i := 0
		for it := v.Children(); it.Next(); {
			p := elemPath(path, i)
			i++
			if l := f.start(it.Node()); l > 0 {
				f.mark(p, l)
			}
			f.value(p, it.Node())
		}
	case unstable.InlineTable:
		for it := v.Children(); it.Next(); {
			f.keyValue(path, it.Node())
		}
	}
}

// start is the line where a value starts, 0 when it is not known: the
// parser gives an array no position, so an array starts where its first
// element does.
func (f *lineFinder) start(v *unstable.Node) int {
	for v.Kind == unstable.Array {
		if v = v.Child(); v == nil {
			return 0
		}
	}
	return f.line(v)
}
