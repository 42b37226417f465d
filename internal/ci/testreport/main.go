// Command testreport reads `go test -json` on its standard input and
// tells a person watching .ci/run what happens as it happens:
//
//  1. a line per package as it finishes: its result and how long it took
//     (packages without tests are counted, not listed);
//  2. after every minute without such a line, which packages still run
//     and for how long;
//  3. at the end, every failure's output, the total time, the five
//     slowest packages and how many passed and failed.
//
// It exits 1 when a package failed or did not build, 0 otherwise. Lines
// that are not JSON (the go command's own messages) pass through.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

func main() {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	os.Exit(report(readLines(os.Stdin), os.Stdout, t.C, time.Now))
}

// readLines sends the lines of in, and closes the channel at its end.
func readLines(in io.Reader) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines
}

// event is one line of test2json (cmd/test2json), with the go command's
// build events (Action build-output and build-fail, by ImportPath).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string
	Test       string
	Elapsed    float64
	Output     string
}

// pkg is what is known of one package.
type pkg struct {
	name    string
	started time.Time
	took    time.Duration
	result  string // "ok", "FAIL", "" while running
	noTests bool
	output  []string
}

// report reads lines of events until the channel closes, writing the
// report to out. tick, every time it fires, asks for the packages still
// running when nothing finished since the last one; now reads the clock.
func report(lines <-chan string, out io.Writer, tick <-chan time.Time, now func() time.Time) int {
	began := now()
	pkgs := map[string]*pkg{}
	get := func(name string) *pkg {
		p := pkgs[name]
		if p == nil {
			p = &pkg{name: name, started: now()}
			pkgs[name] = p
		}
		return p
	}
	var order []*pkg // finished, in order
	quiet := true    // nothing finished since the last tick
	failed := false
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return summary(out, order, pkgs, now().Sub(began), failed)
			}
			var e event
			if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &e) != nil {
				fmt.Fprintln(out, l)
				continue
			}
			switch {
			case e.Action == "build-output":
				p := get(e.ImportPath)
				p.output = append(p.output, e.Output)
			case e.Action == "build-fail":
				p := get(e.ImportPath)
				p.result, failed = "FAIL", true
				fmt.Fprintf(out, "FAIL %-56s (build failed)\n", e.ImportPath)
				order, quiet = append(order, p), false
			case e.Package == "":
			case e.Action == "start" && e.Test == "":
				get(e.Package).started = now()
			case e.Action == "output":
				p := get(e.Package)
				p.output = append(p.output, e.Output)
				if e.Test == "" && strings.Contains(e.Output, "[no test files]") {
					p.noTests = true
				}
			case e.Test == "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
				p := get(e.Package)
				p.took = time.Duration(e.Elapsed * float64(time.Second))
				p.result = "ok"
				if e.Action == "fail" {
					p.result, failed = "FAIL", true
				}
				order, quiet = append(order, p), false
				if !p.noTests {
					fmt.Fprintf(out, "%-4s %-56s %7.1fs\n", p.result, p.name, p.took.Seconds())
				}
			}
		case <-tick:
			if !quiet {
				quiet = true
				continue
			}
			var running []string
			for _, p := range pkgs {
				if p.result == "" {
					running = append(running, fmt.Sprintf("%s (%s)", p.name, now().Sub(p.started).Round(time.Second)))
				}
			}
			slices.Sort(running)
			if len(running) > 0 {
				fmt.Fprintf(out, "...  still running after %s: %s\n", now().Sub(began).Round(time.Second), strings.Join(running, ", "))
			}
		}
	}
}

// summary writes the failures' output, the total time and the slowest
// packages, and returns the exit status.
func summary(out io.Writer, order []*pkg, pkgs map[string]*pkg, total time.Duration, failed bool) int {
	var passed, failures int
	for _, p := range order {
		switch {
		case p.result == "FAIL":
			failures++
			fmt.Fprintf(out, "\n---- %s failed:\n%s", p.name, strings.Join(p.output, ""))
		case !p.noTests:
			passed++
		}
	}
	var unfinished []string
	for _, p := range pkgs {
		if p.result == "" {
			unfinished = append(unfinished, p.name)
		}
	}
	slices.Sort(unfinished)
	if len(unfinished) > 0 {
		failed = true
		fmt.Fprintf(out, "\nno result for: %s\n", strings.Join(unfinished, ", "))
	}
	slowest := slices.DeleteFunc(slices.Clone(order), func(p *pkg) bool { return p.noTests })
	slices.SortStableFunc(slowest, func(a, b *pkg) int { return cmp.Compare(b.took, a.took) })
	fmt.Fprintf(out, "\n%d packages passed, %d failed, in %s; the slowest:\n", passed, failures, total.Round(time.Second))
	for _, p := range slowest[:min(5, len(slowest))] {
		fmt.Fprintf(out, "  %7.1fs  %s\n", p.took.Seconds(), p.name)
	}
	if failed {
		return 1
	}
	return 0
}
