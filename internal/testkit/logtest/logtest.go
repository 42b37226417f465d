// Package logtest holds what tests of the commands share about their
// logs: a writer that ends a command run in-process once it logged a
// given message.
package logtest

import (
	"bytes"
	"context"
	"strings"
	"sync"
)

// CancelOn is a log writer that cancels a context once what was written
// contains Msg, so that a daemon run in-process returns as soon as it
// logged that it runs. It keeps everything written.
type CancelOn struct {
	Msg    string
	Cancel context.CancelFunc

	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *CancelOn) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.Msg) {
		w.Cancel()
	}
	return len(p), nil
}

// String is everything written so far.
func (w *CancelOn) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
