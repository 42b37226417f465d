package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// DefaultSignTimeout bounds one external signer run. Hardware tokens may
// wait for a touch, so it is generous.
const DefaultSignTimeout = 2 * time.Minute

// Output limits of an external signer: a signature is 64 bytes; stderr is
// kept only to explain a failure.
const (
	maxSignerStdout = 4096
	maxSignerStderr = 16 << 10
)

// CommandSigner signs with an external program (an HSM client, a hardware
// token): the command runs under `sh -c`, gets the canonical bytes on
// stdin and must print the raw 64-byte signature on stdout and exit 0.
// The command runs in its own process group; on timeout or cancellation the
// whole group is killed.
type CommandSigner struct {
	// Command is the shell command line.
	Command string
	// SignAlgorithm is the algorithm of the key behind the command.
	SignAlgorithm string
	// Timeout bounds each run; DefaultSignTimeout when zero.
	Timeout time.Duration
	// Ctx cancels runs; context.Background when nil.
	Ctx context.Context
}

var _ trust.Signer = (*CommandSigner)(nil)

// Algorithm implements trust.Signer.
func (c *CommandSigner) Algorithm() string {
	if c.SignAlgorithm == "" {
		return proto.AlgorithmEd25519
	}
	return c.SignAlgorithm
}

// Sign implements trust.Signer. A run that exceeds Timeout fails with an
// error wrapping context.DeadlineExceeded; a cancelled Ctx, with its
// error (context.Canceled).
func (c *CommandSigner) Sign(message []byte) ([]byte, error) {
	parent := c.Ctx
	if parent == nil {
		parent = context.Background()
	}
	if err := parent.Err(); err != nil {
		return nil, fmt.Errorf("signer command not started: %w", err)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultSignTimeout
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", c.Command)
	cmd.Stdin = bytes.NewReader(message)
	stdout := &headBuffer{max: maxSignerStdout}
	stderr := &tailBuffer{max: maxSignerStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// sh forks the programs it runs; kill the whole group, and stop waiting
	// for output a leftover grandchild might hold open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case parent.Err() != nil:
		return nil, fmt.Errorf("signer command interrupted: %w", parent.Err())
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("signer command timed out after %s: %w", timeout, context.DeadlineExceeded)
	case err != nil:
		if msg := stderr.lastLine(); msg != "" {
			return nil, fmt.Errorf("signer command: %w: %s", err, msg)
		}
		return nil, fmt.Errorf("signer command: %w", err)
	case stdout.over:
		return nil, fmt.Errorf("signer command wrote more than %d bytes; want a raw %d-byte signature", stdout.max, trust.SignatureSize)
	}
	return stdout.buf, nil
}

// headBuffer keeps the first max bytes written and notes any overflow. It
// has no ReadFrom, so os/exec's copy goes through Write.
type headBuffer struct {
	buf  []byte
	max  int
	over bool
}

func (h *headBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := h.max - len(h.buf); n > room {
		h.over = true
		p = p[:max(room, 0)]
	}
	h.buf = append(h.buf, p...)
	return n, nil // keep draining: the child must not block on a full pipe
}

// tailBuffer keeps the last max bytes written: the end of stderr is where a
// tool explains why it failed.
type tailBuffer struct {
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return n, nil
}

func (t *tailBuffer) lastLine() string {
	msg := strings.TrimSpace(string(t.buf))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	return msg
}
