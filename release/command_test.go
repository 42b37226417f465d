package release_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/release"
	"github.com/nixfleet/nixfleet/trust"
)

// quickly bounds how long a signer run may take once it has been timed out
// or cancelled; the commands under test would otherwise run for 5 s.
const quickly = 3 * time.Second

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// opensslSigner returns a CommandSigner that signs with key through
// `openssl pkeyutl`. With -rawin, openssl needs a regular file to learn the
// message size (it refuses /dev/stdin on a pipe), so stdin is copied to a
// temporary file first.
func opensslSigner(t *testing.T, key *trust.PrivateKey) *release.CommandSigner {
	t.Helper()
	dir := t.TempDir()
	pem, err := key.MarshalPKCS8PEM()
	if err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyPath, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := fmt.Sprintf(`f=$(mktemp -p %s) || exit 1; trap 'rm -f "$f"' EXIT; cat >"$f" && openssl pkeyutl -sign -rawin -inkey %s -in "$f"`,
		shellQuote(dir), shellQuote(keyPath))
	return &release.CommandSigner{Command: cmd, SignAlgorithm: key.Algorithm()}
}

func TestCommandSignerOpenSSL(t *testing.T) {
	t.Parallel()
	key := generateKey(t, proto.AlgorithmEd25519)
	signer := opensslSigner(t, key)

	msg := []byte(`{"hello":"world"}`)
	sig, err := signer.Sign(msg)
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if len(sig) != trust.SignatureSize || !key.Public().Verify(msg, sig) {
		t.Fatalf("openssl signature %x (%d bytes) does not verify", sig, len(sig))
	}

	// A whole release signed through the command is the release the local
	// key signs: ed25519 is deterministic.
	b, err := release.Sign(readFleet(t), release.Options{Signer: signer, PublicKey: key.Public(), Commit: testCommit, Now: testNow})
	if err != nil {
		t.Fatalf("release.Sign: %v", err)
	}
	if err := checkSigned(t, key, b); err != nil {
		t.Error(err)
	}
	if diff := cmp.Diff(signFleet(t, key, readFleet(t), testCommit), b); diff != "" {
		t.Errorf("bundle signed by openssl differs from the one signed locally (-local +openssl):\n%s", diff)
	}
}

func TestCommandSignerAlgorithm(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		alg  string
		want string
	}{
		{name: "default", alg: "", want: proto.AlgorithmEd25519},
		{name: "ed25519", alg: proto.AlgorithmEd25519, want: proto.AlgorithmEd25519},
		{name: "ecdsa-p256", alg: proto.AlgorithmECDSAP256, want: proto.AlgorithmECDSAP256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &release.CommandSigner{Command: "true", SignAlgorithm: tt.alg}
			if got := s.Algorithm(); got != tt.want {
				t.Errorf("Algorithm() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCommandSignerOutput(t *testing.T) {
	t.Parallel()
	msg := bytes.Repeat([]byte("m"), 64)
	tests := []struct {
		name    string
		command string
		msg     []byte
		want    []byte
		// wantErr lists substrings of the error; nil means success.
		wantErr []string
	}{
		{name: "stdin is the message", command: "cat", msg: msg, want: msg},
		{name: "stderr of a successful run is ignored", command: "echo 'touch the token' >&2; head -c 64 /dev/zero", msg: msg, want: make([]byte, 64)},
		{
			// The command need not read the message; os/exec's EPIPE on
			// stdin must not turn success into failure.
			name: "large message left unread", command: "head -c 64 /dev/zero",
			msg: bytes.Repeat([]byte("x"), 1<<20), want: make([]byte, 64),
		},
		{name: "100 bytes are returned as printed", command: "head -c 100 /dev/zero | tr '\\0' 's'", msg: msg, want: bytes.Repeat([]byte("s"), 100)},
		{name: "4096 bytes are the most", command: "head -c 4096 /dev/zero", msg: msg, want: make([]byte, 4096)},
		{name: "4097 bytes", command: "head -c 4097 /dev/zero", msg: msg, wantErr: []string{"more than 4096 bytes"}},
		{name: "far more than 4096 bytes", command: "head -c 1000000 /dev/zero", msg: msg, wantErr: []string{"more than 4096 bytes"}},
		{
			name:    "exit 3 with a message",
			command: "echo 'pkcs11: opening session' >&2; echo 'token not present' >&2; exit 3",
			msg:     msg,
			wantErr: []string{"exit status 3", "token not present"},
		},
		{name: "exit 3 silently", command: "exit 3", msg: msg, wantErr: []string{"exit status 3"}},
		{name: "exit 3 after printing a signature", command: "head -c 64 /dev/zero; exit 3", msg: msg, wantErr: []string{"exit status 3"}},
		{name: "command not found", command: "nixfleet-no-such-signer-command", msg: msg, wantErr: []string{"exit status 127", "not found"}},
		{name: "killed by a signal", command: "kill -9 $$", msg: msg, wantErr: []string{"killed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &release.CommandSigner{Command: tt.command}
			got, err := s.Sign(tt.msg)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Sign = %d bytes, want an error", len(got))
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("Sign = %q (%d bytes), want %q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
		})
	}
}

// TestCommandSignerWrongSize: a command may print anything up to the cap;
// release.Sign is what refuses a signature of the wrong size.
func TestCommandSignerWrongSize(t *testing.T) {
	t.Parallel()
	key := generateKey(t, proto.AlgorithmEd25519)
	for _, pub := range []*trust.PublicKey{nil, key.Public()} {
		t.Run(fmt.Sprintf("public key %v", pub != nil), func(t *testing.T) {
			t.Parallel()
			s := &release.CommandSigner{Command: "head -c 100 /dev/zero"}
			b, err := release.Sign(readFleet(t), release.Options{Signer: s, PublicKey: pub, Commit: testCommit, Now: testNow})
			if !errors.Is(err, release.ErrSigner) {
				t.Fatalf("release.Sign error = %v, want one wrapping ErrSigner", err)
			}
			if !strings.Contains(err.Error(), "100 bytes") {
				t.Errorf("error does not give the size: %v", err)
			}
			if b != nil {
				t.Error("release.Sign returned a bundle along with the error")
			}
		})
	}
}

func TestCommandSignerTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		command string
	}{
		{name: "exec sleep", command: "exec sleep 5"},
		// sh (dash) forks sleep here: the child that must die is a
		// grandchild of the Go process and holds stdout open.
		{name: "sleep", command: "sleep 5"},
		{name: "pipeline", command: "sleep 5 | cat"},
		{name: "background child", command: "sleep 5 & wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &release.CommandSigner{Command: tt.command, Timeout: 200 * time.Millisecond}
			start := time.Now()
			sig, err := s.Sign([]byte("message"))
			elapsed := time.Since(start)
			if err == nil {
				t.Fatalf("Sign = %x, want a timeout error", sig)
			}
			if !strings.Contains(err.Error(), "timed out") {
				t.Errorf("error %q does not say the signer timed out", err)
			}
			if elapsed > quickly {
				t.Errorf("Sign returned after %s with a 200ms timeout; the signer's processes were not stopped", elapsed.Round(time.Millisecond))
			}
		})
	}
}

// startedSigner returns a signer whose command tells the test, through a
// FIFO, that it is running, then runs rest; and a channel that receives once
// the command has started.
func startedSigner(t *testing.T, ctx context.Context, rest string) (*release.CommandSigner, <-chan error) {
	t.Helper()
	fifo := filepath.Join(t.TempDir(), "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() {
		// Opening a FIFO for reading blocks until the command opens it.
		_, err := os.ReadFile(fifo)
		started <- err
	}()
	return &release.CommandSigner{Command: fmt.Sprintf("echo started > %s; %s", shellQuote(fifo), rest), Ctx: ctx}, started
}

type signResult struct {
	sig []byte
	err error
}

// signCancelled runs s.Sign, cancels ctx once the command has started, and
// returns the result and how long Sign took after the cancellation.
func signCancelled(t *testing.T, s *release.CommandSigner, started <-chan error, cancel context.CancelFunc) (signResult, time.Duration) {
	t.Helper()
	done := make(chan signResult, 1)
	go func() {
		sig, err := s.Sign([]byte("message"))
		done <- signResult{sig, err}
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case r := <-done:
		t.Fatalf("Sign returned before its command started: %x, %v", r.sig, r.err)
	}
	cancel()
	start := time.Now()
	r := <-done
	return r, time.Since(start)
}

func TestCommandSignerCancel(t *testing.T) {
	t.Parallel()
	t.Run("while running", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// exec: the process to stop is sh itself, so this checks the
		// cancellation alone (TestCommandSignerTimeout covers children).
		s, started := startedSigner(t, ctx, "exec sleep 5")
		r, elapsed := signCancelled(t, s, started, cancel)
		if r.err == nil {
			t.Fatalf("Sign = %x after cancellation, want an error", r.sig)
		}
		if elapsed > quickly {
			t.Errorf("Sign returned %s after the cancellation", elapsed.Round(time.Millisecond))
		}
	})
	t.Run("before running", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		marker := filepath.Join(t.TempDir(), "ran")
		s := &release.CommandSigner{Command: "touch " + shellQuote(marker) + "; head -c 64 /dev/zero", Ctx: ctx}
		sig, err := s.Sign([]byte("message"))
		if err == nil {
			t.Fatalf("Sign = %x with a cancelled context, want an error", sig)
		}
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the command ran although the context was already cancelled (stat: %v)", err)
		}
	})
	t.Run("release.Sign", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s := &release.CommandSigner{Command: "head -c 64 /dev/zero", Ctx: ctx}
		b, err := release.Sign(readFleet(t), release.Options{Signer: s, Commit: testCommit, Now: testNow})
		if !errors.Is(err, release.ErrSigner) || b != nil {
			t.Fatalf("release.Sign = %v, %v; want no bundle and an error wrapping ErrSigner", b, err)
		}
	})
}

// TestCommandSignerCancellationIsNotATimeout: a cancelled run (Ctrl-C, the
// CLI's context) must be reported as a cancellation that callers can test
// for, not as the signer timing out.
func TestCommandSignerCancellationIsNotATimeout(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, err error) {
		t.Helper()
		if err == nil {
			t.Fatal("Sign succeeded after cancellation")
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %q does not wrap context.Canceled", err)
		}
		if strings.Contains(err.Error(), "timed out") {
			t.Errorf("error %q reports a timeout; the run was cancelled", err)
		}
	}
	t.Run("while running", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, started := startedSigner(t, ctx, "exec sleep 5")
		r, _ := signCancelled(t, s, started, cancel)
		check(t, r.err)
	})
	t.Run("before running", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := (&release.CommandSigner{Command: "head -c 64 /dev/zero", Ctx: ctx}).Sign([]byte("message"))
		check(t, err)
	})
}
