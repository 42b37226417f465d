package release

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// DefaultSignTimeout bounds one external signer run. Hardware tokens may
// wait for a touch, so it is generous.
const DefaultSignTimeout = 2 * time.Minute

// CommandSigner signs with an external program (an HSM client, a hardware
// token): the command runs under `sh -c`, gets the canonical bytes on
// stdin and must print the raw 64-byte signature on stdout and exit 0.
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

// Sign implements trust.Signer.
func (c *CommandSigner) Sign(message []byte) ([]byte, error) {
	ctx := c.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = DefaultSignTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", c.Command)
	cmd.Stdin = bytes.NewReader(message)
	var stdout, stderr capped
	stdout.max, stderr.max = 4096, 16<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("signer command timed out after %s", timeout)
		}
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg != "" {
			return nil, fmt.Errorf("signer command: %w: %s", err, msg)
		}
		return nil, fmt.Errorf("signer command: %w", err)
	}
	if stdout.over {
		return nil, fmt.Errorf("signer command wrote more than %d bytes; want a raw %d-byte signature", stdout.max, trust.SignatureSize)
	}
	return stdout.Bytes(), nil
}

// capped is a buffer that keeps at most max bytes and remembers overflow.
type capped struct {
	bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); len(p) > room {
		c.over = true
		if room > 0 {
			c.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return c.Buffer.Write(p)
}
