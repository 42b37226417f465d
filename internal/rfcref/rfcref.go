package rfcref

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Set is the RFCs of a repository, as references see them.
type Set struct {
	dir   string
	files map[string]bool // file names in dir
	byNum map[string]*rfc // by "NNNN"
}

type rfc struct {
	file     string
	headings []heading
	rules    map[int]bool // items of "## Rules"; nil without one
}

type heading struct {
	level  int
	words  []string
	number string       // "4.1" of "### 4.1 Projection", "4" of "## 4. …"; "" when none
	items  map[int]bool // "N. " lines at column 0 before the next heading
}

var (
	headingRe = regexp.MustCompile(`^(#{2,4})\s+(.*?)\s*$`)
	numberRe  = regexp.MustCompile(`^(\d+(?:\.\d+)*)\.?$`)
	itemRe    = regexp.MustCompile(`^(\d+)\.\s`)
	rfcFileRe = regexp.MustCompile(`^(\d{4})-.*\.md$`)
)

// Load reads the RFCs, dir/NNNN-*.md, of fsys.
func Load(fsys fs.FS, dir string) (*Set, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	s := &Set{dir: dir, files: map[string]bool{}, byNum: map[string]*rfc{}}
	for _, e := range entries {
		s.files[e.Name()] = true
		m := rfcFileRe.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if prev := s.byNum[m[1]]; prev != nil {
			return nil, fmt.Errorf("rfcref: %s and %s have one number", prev.file, e.Name())
		}
		s.byNum[m[1]] = parseRFC(e.Name(), b)
	}
	return s, nil
}

// parseRFC reads an RFC's headings and their numbered items.
func parseRFC(file string, b []byte) *rfc {
	r := &rfc{file: file}
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			h := heading{level: len(m[1]), items: map[int]bool{}}
			for _, w := range strings.Fields(m[2]) {
				// "#### Events: `GET …`" is named "§Events".
				h.words = append(h.words, strings.TrimRight(w, ":,;"))
			}
			if len(h.words) > 0 {
				if n := numberRe.FindStringSubmatch(h.words[0]); n != nil {
					h.number = n[1]
				}
			}
			r.headings = append(r.headings, h)
			if h.level == 2 && slices.Equal(h.words, []string{"Rules"}) {
				r.rules = h.items
			}
			continue
		}
		if m := itemRe.FindStringSubmatch(line); m != nil && len(r.headings) > 0 {
			n, _ := strconv.Atoi(m[1])
			r.headings[len(r.headings)-1].items[n] = true
		}
	}
	return r
}

// Problem is a reference that names nothing.
type Problem struct {
	File string
	Line int
	// Ref is the reference as written (the RFC and its §X or rules).
	Ref string
	// Why says what does not exist.
	Why string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Ref, p.Why) }

var (
	// idRe finds the candidates; Check decides which are references.
	idRe       = regexp.MustCompile(`rfcs/(\d{4})(-[A-Za-z0-9-]+(?:\.md)?)?|(\d{4})`)
	sectionRe  = regexp.MustCompile(`^\s*§`)
	rulesRe    = regexp.MustCompile(`^\s*rules?\s+(\d+(?:\s*[–-]\s*\d+)?(?:(?:\s*,\s*and\s+|\s*,\s*|\s+and\s+)\d+(?:\s*[–-]\s*\d+)?)*)`)
	ruleNumRe  = regexp.MustCompile(`(\d+)(?:\s*[–-]\s*(\d+))?`)
	afterXRe   = regexp.MustCompile(`^,\s*rules?\s`)
	commentRe  = regexp.MustCompile(`^\s*//\s?`)
	dottedRe   = regexp.MustCompile(`^\d+(?:\.\d+)+$`)
	allDigitRe = regexp.MustCompile(`^\d+$`)
)

// Check reads the references of one file's source: how many there are,
// and the broken ones, in order.
func (s *Set) Check(file string, src []byte) (refs int, problems []Problem) {
	lines := strings.Split(string(src), "\n")
	for i, line := range lines {
		for _, m := range idRe.FindAllStringSubmatchIndex(line, -1) {
			ref, ps := s.checkAt(file, i, lines, m)
			if ref {
				refs++
			}
			problems = append(problems, ps...)
		}
	}
	return refs, problems
}

// checkAt checks the candidate m of line i: whether it is a reference,
// and what is broken in it.
func (s *Set) checkAt(file string, i int, lines []string, m []int) (bool, []Problem) {
	line := lines[i]
	start, end := m[0], m[1]
	tail := line[end:]
	// A reference wrapped after its RFC goes on at the next comment line.
	if strings.TrimSpace(tail) == "" && i+1 < len(lines) && commentRe.MatchString(lines[i+1]) {
		next := commentRe.ReplaceAllString(lines[i+1], "")
		if sectionRe.MatchString(next) || rulesRe.MatchString(next) {
			tail = " " + next
		}
	}
	if end < len(line) && isWordByte(line[end]) {
		return false, nil // part of a longer word or number
	}
	problem := func(ref, why string) Problem {
		return Problem{File: file, Line: i + 1, Ref: strings.TrimSpace(ref), Why: why}
	}
	var r *rfc
	id := line[start:end]
	if m[2] >= 0 { // rfcs/NNNN[-name[.md]]
		num := line[m[2]:m[3]]
		r = s.byNum[num]
		if m[4] >= 0 {
			name := num + strings.TrimSuffix(line[m[4]:m[5]], ".md") + ".md"
			if !s.files[name] {
				return true, []Problem{problem(id, "no file "+path.Join(s.dir, name))}
			}
		} else if r == nil {
			return true, []Problem{problem(id, fmt.Sprintf("no RFC %s in %s", num, s.dir))}
		}
	} else { // a bare NNNN
		if start > 0 && (isWordByte(line[start-1]) || strings.ContainsRune("/.-", rune(line[start-1]))) {
			return false, nil
		}
		r = s.byNum[line[m[6]:m[7]]]
		if r == nil || !(sectionRe.MatchString(tail) && strings.HasPrefix(tail, " §") || rulesRe.MatchString(tail) && strings.HasPrefix(tail, " r")) {
			return false, nil
		}
	}
	switch {
	case sectionRe.MatchString(tail):
		x, rest := sectionText(tail[strings.Index(tail, "§")+len("§"):])
		ref := id + " §" + x
		var out []Problem
		if why := r.section(x); why != "" {
			out = append(out, problem(ref, why))
		}
		if afterXRe.MatchString(rest) {
			rest = rest[1:]
			if p, ok := r.checkRules(rest); ok && p != "" {
				out = append(out, problem(ref+", "+strings.TrimSpace(rulesRe.FindString(rest)), p))
			}
		}
		return true, out
	case rulesRe.MatchString(tail):
		if p, ok := r.checkRules(tail); ok && p != "" {
			return true, []Problem{problem(id+" "+strings.TrimSpace(rulesRe.FindString(tail)), p)}
		}
	}
	return true, nil
}

// isWordByte reports whether b continues a word or a number.
func isWordByte(b byte) bool {
	return b == '_' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9'
}

// sectionText splits what follows a "§" into X and the rest, at the first
// terminator.
func sectionText(t string) (x, rest string) {
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case strings.IndexByte(`),;:"`+"`]", c) >= 0:
			return strings.TrimSpace(t[:i]), t[i:]
		case c == '.' && (i+1 == len(t) || t[i+1] == ' ' || t[i+1] == '\t'):
			return strings.TrimSpace(t[:i]), t[i:]
		}
	}
	return strings.TrimSpace(t), ""
}

// section says why X names no heading of r ("" when it names one).
func (r *rfc) section(x string) string {
	xw := strings.Fields(x)
	if len(xw) == 0 {
		return "an empty § reference"
	}
	why := fmt.Sprintf("no heading %q in rfcs/%s", x, r.file)
	for _, h := range r.headings {
		for _, hw := range h.names() {
			switch {
			case len(hw) <= len(xw) && slices.Equal(hw, xw[:len(hw)]):
				rest := xw[len(hw):]
				if len(rest) == 0 || !allDigitRe.MatchString(rest[0]) {
					return ""
				}
				if n, _ := strconv.Atoi(rest[0]); h.items[n] {
					return ""
				}
				why = fmt.Sprintf("no item %s in §%s of rfcs/%s", rest[0], strings.Join(hw, " "), r.file)
			case len(hw) > len(xw) && slices.Equal(hw[:len(xw)], xw):
				return ""
			}
		}
	}
	// A dotted number that is no heading's: an item of the heading
	// numbered by the rest.
	if d := xw[0]; dottedRe.MatchString(d) {
		dot := strings.LastIndexByte(d, '.')
		n, _ := strconv.Atoi(d[dot+1:])
		for _, h := range r.headings {
			if h.number == d[:dot] {
				if h.items[n] {
					return ""
				}
				return fmt.Sprintf("no heading %s, nor item %d in §%s of rfcs/%s", d, n, d[:dot], r.file)
			}
		}
	}
	return why
}

// names are the word lists that name a heading: its words, and for a
// numbered heading its number alone.
func (h heading) names() [][]string {
	if h.number == "" {
		return [][]string{h.words}
	}
	return [][]string{h.words, {h.number}}
}

// checkRules checks "rule N" or "rules …" at the start of t: ok is false
// when t holds none; the string says which rule is missing.
func (r *rfc) checkRules(t string) (string, bool) {
	m := rulesRe.FindStringSubmatch(t)
	if m == nil {
		return "", false
	}
	if r.rules == nil {
		return fmt.Sprintf("rfcs/%s has no ## Rules", r.file), true
	}
	for _, n := range ruleNumRe.FindAllStringSubmatch(m[1], -1) {
		lo, _ := strconv.Atoi(n[1])
		hi := lo
		if n[2] != "" {
			hi, _ = strconv.Atoi(n[2])
		}
		for k := lo; k <= hi; k++ {
			if !r.rules[k] {
				return fmt.Sprintf("no rule %d in rfcs/%s", k, r.file), true
			}
		}
	}
	return "", true
}
