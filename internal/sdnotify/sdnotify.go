// Package sdnotify tells the service manager how a daemon is doing, as
// sd_notify(3) does: readiness, watchdog keep-alives and stopping, one
// datagram each on the socket systemd names in $NOTIFY_SOCKET (a unit of
// Type=notify). Without that variable it does nothing, so a daemon run by
// hand, in a container or under another supervisor is unaffected.
package sdnotify

import (
	"net"
	"os"
	"strconv"
	"time"
)

// Notifier sends states to the service manager. A nil *Notifier sends
// nothing.
type Notifier struct {
	addr *net.UnixAddr
	// watchdog is how often the manager wants a keep-alive: half of
	// $WATCHDOG_USEC, as sd_watchdog_enabled(3) advises; 0 for none.
	watchdog time.Duration
}

// FromEnv returns the notifier of $NOTIFY_SOCKET and $WATCHDOG_USEC, or
// nil when the manager asked for no notifications. A watchdog meant for
// another process ($WATCHDOG_PID) is not this one's.
func FromEnv() *Notifier {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' { // an abstract socket
		path = "\x00" + path[1:]
	}
	n := &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
	usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
	pid := os.Getenv("WATCHDOG_PID")
	if err == nil && usec > 0 && (pid == "" || pid == strconv.Itoa(os.Getpid())) {
		n.watchdog = time.Duration(usec) * time.Microsecond / 2
	}
	return n
}

// Notify sends one state (lines of KEY=VALUE: "READY=1", "WATCHDOG=1",
// "STOPPING=1", "STATUS=…").
func (n *Notifier) Notify(state string) error {
	if n == nil {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

// WatchdogEvery is how often to send "WATCHDOG=1", 0 when the manager
// runs no watchdog for this process.
func (n *Notifier) WatchdogEvery() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog
}
