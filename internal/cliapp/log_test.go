package cliapp

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestLogger: --log-format text writes key=value lines, json writes JSON
// objects, both at --log-level; an unknown level or format is a usage
// error naming its flag.
func TestLogger(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, level, format string
		check               func(t *testing.T, out string)
		err                 string // the error's prefix; "" for none
	}{
		{name: "text", level: "info", format: "text", check: func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], `level=INFO msg="agent running" host=web-1`) ||
				!strings.Contains(lines[1], `level=WARN msg=late`) {
				t.Errorf("text log:\n%s", out)
			}
			if json.Valid([]byte(lines[0])) {
				t.Errorf("text log is JSON: %s", lines[0])
			}
		}},
		{name: "json", level: "info", format: "json", check: func(t *testing.T, out string) {
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 2 {
				t.Fatalf("json log:\n%s", out)
			}
			var rec struct{ Level, Msg, Host string }
			if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec != (struct{ Level, Msg, Host string }{"INFO", "agent running", "web-1"}) {
				t.Errorf("json log line %s: %+v, %v", lines[0], rec, err)
			}
		}},
		{name: "debug level", level: "DEBUG", format: "text", check: func(t *testing.T, out string) {
			if !strings.Contains(out, "level=DEBUG msg=detail") {
				t.Errorf("no debug line at --log-level DEBUG:\n%s", out)
			}
		}},
		{name: "warn level", level: "warn", format: "json", check: func(t *testing.T, out string) {
			if strings.Contains(out, "agent running") || !strings.Contains(out, `"msg":"late"`) {
				t.Errorf("at --log-level warn:\n%s", out)
			}
		}},
		{name: "bad format", level: "info", format: "xml", err: `--log-format "xml": want text or json`},
		{name: "format case", level: "info", format: "JSON", err: `--log-format "JSON": want text or json`},
		{name: "empty format", level: "info", format: "", err: `--log-format "": want text or json`},
		{name: "bad level", level: "loud", format: "text", err: "--log-level: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := Logger(&buf, tc.level, tc.format)
			if tc.err != "" {
				var u UsageError
				if err == nil || !errors.As(err, &u) || !strings.HasPrefix(err.Error(), tc.err) || log != nil {
					t.Fatalf("Logger(%q, %q) = %v, %v; want a usage error %q…", tc.level, tc.format, log, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			log.Debug("detail")
			log.Info("agent running", "host", "web-1")
			log.Warn("late")
			tc.check(t, buf.String())
		})
	}
}
