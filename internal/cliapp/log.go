package cliapp

import (
	"fmt"
	"io"
	"log/slog"
)

// Logger returns the log a daemon writes to w, from its --log-level
// (debug, info, warn or error) and --log-format flags: "text" is slog's
// key=value lines (level=INFO msg=…), for people reading the journal;
// "json" is one JSON object a line, for machines. A value it does not know
// is a [UsageError] naming the flag.
func Logger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, Usage(fmt.Errorf("--log-level: %w", err))
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, Usage(fmt.Errorf("--log-format %q: want text or json", format))
}
