package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// style is how human output looks: progress bars only on a terminal,
// colour only on a terminal when NO_COLOR is not set (no-color.org) and
// TERM is not "dumb". Colour never carries meaning alone: every coloured
// word is printed as a word.
type style struct {
	tty, colour bool
	// width is how many columns a line may take: COLUMNS when set, else
	// the terminal's width (defaultWidth when it cannot be read); 0 off a
	// terminal, where nothing is wrapped: one record a line, for grep and
	// tail (rfcs/0009 §Human output 4).
	width int
}

// defaultWidth is a terminal's width when it cannot be read.
const defaultWidth = 120

// styleFor looks at the writer and the environment.
func styleFor(w io.Writer, getenv func(string) string) style {
	columns, _ := strconv.Atoi(getenv("COLUMNS"))
	columns = max(columns, 0)
	f, ok := w.(*os.File)
	if !ok {
		return style{width: columns}
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return style{width: columns}
	}
	if columns == 0 {
		columns = defaultWidth
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			columns = int(ws.Col)
		}
	}
	return style{tty: true, colour: getenv("NO_COLOR") == "" && getenv("TERM") != "dumb", width: columns}
}

// ANSI colours.
const (
	ansiRed    = "31"
	ansiGreen  = "32"
	ansiYellow = "33"
	ansiCyan   = "36"
	ansiDim    = "2"
)

func (s style) paint(code, text string) string {
	if !s.colour || code == "" || text == "" {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

// stateColour is the colour of a host or rollout state, or of a verdict
// word.
func stateColour(state string) string {
	switch state {
	case "Converged", "accepted", "online", "opened":
		return ansiGreen
	case "Failed", "Halted", "Reverting", "Reverted", "RollingBack", "refused", "offline":
		return ansiRed
	case "Pending", "Skipped", "Deferred", "Cancelled", "Superseded", "Paused", "queued", "never seen",
		"pending", "waiting", "deferred", "superseded":
		return ansiYellow
	case "Opening", "Active", "Activating", "Rebooting", "Soaking":
		return ansiCyan
	}
	return ""
}

// state paints a state name by its meaning.
func (s style) state(name string) string { return s.paint(stateColour(name), name) }

// table lays out rows in columns two spaces apart, padded by their
// visible width (colour codes do not count). A column may be painted.
type table struct {
	rows  [][]string
	paint map[int]func(string) string
}

func newTable(header ...string) *table {
	return &table{rows: [][]string{header}, paint: map[int]func(string) string{}}
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	for ri, r := range t.rows {
		var b strings.Builder
		for i, c := range r {
			text := c
			if p := t.paint[i]; p != nil && ri > 0 {
				text = p(c)
			}
			b.WriteString(text)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// fields writes "name  value" lines with the names aligned.
type fields struct {
	rows [][2]string
}

func (f *fields) add(name, value string) { f.rows = append(f.rows, [2]string{name, value}) }

func (f *fields) write(w io.Writer) {
	width := 0
	for _, r := range f.rows {
		width = max(width, utf8.RuneCountInString(r[0]))
	}
	for _, r := range f.rows {
		fmt.Fprintf(w, "%s%s  %s\n", r[0], strings.Repeat(" ", width-utf8.RuneCountInString(r[0])), r[1])
	}
}

// progressBar is a text bar of width cells for done out of total.
func progressBar(done, total, width int) string {
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}

// when formats a time for people: UTC, to the second; "-" when zero.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// dash is s, or "-" when empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// reasonLine is "[code] message", or "-" when both are empty.
func reasonLine(code, message string) string {
	switch {
	case code == "" && message == "":
		return "-"
	case code == "":
		return message
	case message == "":
		return "[" + code + "]"
	}
	return "[" + code + "] " + message
}
