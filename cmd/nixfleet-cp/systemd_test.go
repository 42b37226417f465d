package main

import (
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdNotify: nixfleet-cp serve under a Type=notify unit. With the
// socket systemd binds in $NOTIFY_SOCKET and a watchdog of 400 ms
// ($WATCHDOG_USEC), the replica says READY=1 once it serves (GET /readyz
// answers then), sends WATCHDOG=1 every 200 ms from its loop while it
// runs (from its start, before READY=1 too), and STOPPING=1 on SIGTERM
// before it exits cleanly.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	type datagram struct {
		state string
		at    time.Time
	}
	got := make(chan datagram, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := sock.Read(buf)
			if err != nil {
				return
			}
			got <- datagram{string(buf[:n]), time.Now()}
		}
	}()
	next := func(what string) datagram {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(20 * time.Second):
			t.Fatalf("no datagram from the replica: want %s", what)
			return datagram{}
		}
	}

	f := newGitFleet(t, twoWaveSpec())
	f.Release("v0")
	r := newReplica(t, newSite(t), "cp-1", "", "--db", dbURL(t, "sqlite"), "--repo", f.Bare, "--trust", f.TrustFile,
		"--state-dir", t.TempDir())
	r.env = []string{"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=400000"}
	began := time.Now()
	r.start() // waits for GET /readyz

	// Keep-alives may come before READY=1 (a first read of the fleet
	// repository that takes longer than 200 ms): systemd arms the watchdog
	// only once the unit started, so they are harmless there.
	dogs := 0
	for {
		d := next("READY=1")
		if d.state == "WATCHDOG=1" {
			dogs++
			continue
		}
		if d.state != "READY=1\nSTATUS=serving" {
			t.Fatalf("the replica said %q before READY=1, want READY=1 with STATUS=serving", d.state)
		}
		break
	}
	for seen := 0; seen < 5; seen++ {
		d := next("WATCHDOG=1")
		if d.state != "WATCHDOG=1" {
			t.Fatalf("while serving, the replica sent %q, want WATCHDOG=1", d.state)
		}
		dogs++
	}
	// Every 200 ms: the pace is the manager's, not a tight loop's. What
	// was read by now was sent since the process started, and a busy
	// machine only delays the reads, so the count has a ceiling.
	if most := int(time.Since(began)/(200*time.Millisecond)) + 1; dogs > most {
		t.Errorf("%d keep-alives within %s, want one every 200ms (half of WATCHDOG_USEC), at most %d", dogs, time.Since(began), most)
	}

	if err := syscall.Kill(r.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		d := next("STOPPING=1")
		if d.state == "WATCHDOG=1" {
			continue
		}
		if !strings.HasPrefix(d.state, "STOPPING=1") {
			t.Fatalf("on SIGTERM the replica sent %q, want STOPPING=1", d.state)
		}
		break
	}
	select {
	case <-r.exited:
		if r.err != nil {
			t.Errorf("exit after SIGTERM: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
}
