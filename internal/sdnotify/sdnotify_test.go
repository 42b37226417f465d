package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// listen binds a datagram socket as systemd does for a Type=notify unit.
func listen(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestNotify: with $NOTIFY_SOCKET, each state is one datagram; the
// watchdog interval is half of $WATCHDOG_USEC, for this process only;
// without the variable nothing is sent and nil is safe.
func TestNotify(t *testing.T) {
	c, path := listen(t)
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "4000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	n := FromEnv()
	if n.WatchdogEvery() != 2*time.Second {
		t.Errorf("watchdog every %s, want 2s", n.WatchdogEvery())
	}
	for _, state := range []string{"READY=1\nSTATUS=serving", "WATCHDOG=1", "STOPPING=1"} {
		if err := n.Notify(state); err != nil {
			t.Fatal(err)
		}
		if got := read(t, c); got != state {
			t.Errorf("sent %q, the manager read %q", state, got)
		}
	}

	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1))
	if d := FromEnv().WatchdogEvery(); d != 0 {
		t.Errorf("a watchdog for another process: every %s, want none", d)
	}
	t.Setenv("WATCHDOG_USEC", "")
	if d := FromEnv().WatchdogEvery(); d != 0 {
		t.Errorf("no WATCHDOG_USEC: every %s, want none", d)
	}

	t.Setenv("NOTIFY_SOCKET", "")
	var none *Notifier
	if FromEnv() != none {
		t.Error("a notifier without NOTIFY_SOCKET")
	}
	if err := none.Notify("READY=1"); err != nil || none.WatchdogEvery() != 0 {
		t.Errorf("a nil notifier: %v, every %s", err, none.WatchdogEvery())
	}
}

// TestNotifyNoManager: a socket nobody listens on is an error the daemon
// can log, not a hang.
func TestNotifyNoManager(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
	if err := FromEnv().Notify("READY=1"); err == nil {
		t.Fatal("no error for a socket nobody listens on")
	}
}
