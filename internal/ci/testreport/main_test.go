package main

import (
	"strings"
	"testing"
	"time"
)

// run feeds lines to report one at a time, sending a tick where a line
// is "TICK" (each is taken only once the last was handled), and returns
// the report and its exit status.
func run(t *testing.T, lines ...string) (string, int) {
	t.Helper()
	in := make(chan string)
	tick := make(chan time.Time)
	var out strings.Builder
	clock := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	now := func() time.Time { clock = clock.Add(time.Second); return clock }
	done := make(chan int)
	go func() { done <- report(in, &out, tick, now) }()
	for _, l := range lines {
		if l == "TICK" {
			tick <- time.Time{}
		} else {
			in <- l
		}
	}
	close(in)
	code := <-done
	return out.String(), code
}

func TestReport(t *testing.T) {
	t.Parallel()
	out, code := run(t,
		`{"Action":"start","Package":"x/a"}`,
		`{"Action":"start","Package":"x/b"}`,
		"TICK",
		`{"Action":"run","Package":"x/b","Test":"TestB"}`,
		`{"Action":"pass","Package":"x/b","Test":"TestB","Elapsed":1.2}`,
		`{"Action":"output","Package":"x/b","Output":"ok  \tx/b\t1.5s\n"}`,
		`{"Action":"pass","Package":"x/b","Elapsed":1.5}`,
		"TICK", // something finished: no line
		`{"Action":"output","Package":"x/a","Test":"TestA","Output":"    a_test.go:9: it broke\n"}`,
		`{"Action":"fail","Package":"x/a","Test":"TestA","Elapsed":2.9}`,
		`{"Action":"fail","Package":"x/a","Elapsed":3}`,
		`{"Action":"start","Package":"x/c"}`,
		`{"Action":"output","Package":"x/c","Output":"?   \tx/c\t[no test files]\n"}`,
		`{"Action":"skip","Package":"x/c","Elapsed":0}`,
		"go: downloading example.com/m v1.0.0",
	)
	if code != 1 {
		t.Errorf("exit %d, want 1 (x/a failed)", code)
	}
	for _, want := range []string{
		"...  still running after ",
		"ok   x/b" + strings.Repeat(" ", 54) + "    1.5s\n",
		"FAIL x/a" + strings.Repeat(" ", 54) + "    3.0s\n",
		"go: downloading example.com/m v1.0.0\n",
		"\n---- x/a failed:\n    a_test.go:9: it broke\n",
		"\n1 packages passed, 1 failed, in ",
		"the slowest:\n      3.0s  x/a\n      1.5s  x/b\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "still running") != 1 || strings.Contains(out, "x/c") {
		t.Errorf("the report lists a quiet tick or a package without tests:\n%s", out)
	}
}

func TestReportBuildFailureAndNoResult(t *testing.T) {
	t.Parallel()
	out, code := run(t,
		`{"ImportPath":"x/d [x/d.test]","Action":"build-output","Output":"d.go:3:1: syntax error\n"}`,
		`{"ImportPath":"x/d [x/d.test]","Action":"build-fail"}`,
		`{"Action":"start","Package":"x/e"}`,
		`{"Action":"pass","Package":"x/f","Elapsed":0.5}`,
	)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{"FAIL x/d [x/d.test]", "(build failed)", "d.go:3:1: syntax error", "no result for: x/e", "1 packages passed, 1 failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if out, code := run(t, `{"Action":"pass","Package":"x/g","Elapsed":0.1}`); code != 0 || !strings.Contains(out, "1 packages passed, 0 failed") {
		t.Errorf("a passing run: exit %d:\n%s", code, out)
	}
}
