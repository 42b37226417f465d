package nixtest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNet: hosts in their own network namespaces reach the gateway and
// each other, not an address of the subnet nobody holds (the guard route),
// lose the network when cut off and get it back; when the test ends the
// namespaces, links and the guard are gone.
func TestNet(t *testing.T) {
	t.Parallel()
	var tag, subnet string
	t.Run("net", func(t *testing.T) {
		n := NewNet(t)
		tag, subnet = n.tag, n.Subnet().String()
		if got := ipOut(t, "route", "show", "exact", subnet); !strings.HasPrefix(got, "unreachable "+subnet) {
			t.Errorf("route of the subnet: %q, want unreachable", got)
		}
		// A second network at the same time gets another subnet.
		if other := NewNet(t); other.Subnet() == n.Subnet() || other.tag == n.tag {
			t.Errorf("two networks share subnet %s", n.Subnet())
		}
		if got := ipOut(t, "route", "get", n.Host(200)); !strings.Contains(got, "No route to host") {
			t.Errorf("route to an unused address of the subnet: %q, want none", got)
		}
		l, err := net.Listen("tcp", n.Addr(0))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		port := l.Addr().(*net.TCPAddr).Port

		a, b := NewHost(t, "a"), NewHost(t, "b")
		addrA, addrB := n.Attach(t, a), n.Attach(t, b)
		if addrA != n.Host(10) || addrB != n.Host(11) {
			t.Errorf("addresses %s, %s", addrA, addrB)
		}
		if err := connect(a, n.Gateway, port); err != nil {
			t.Errorf("a cannot reach the gateway: %v", err)
		}
		if err := connect(a, "127.0.0.1", port); err == nil {
			t.Errorf("a reached the test's loopback: namespaces are not separate")
		}
		if err := connect(b, n.Host(200), port); err == nil {
			t.Errorf("b reached an address nobody holds")
		}
		n.SetOnline(t, a, false)
		if err := connect(a, n.Gateway, port); err == nil {
			t.Errorf("a reached the gateway while cut off")
		}
		n.SetOnline(t, a, true)
		if err := connect(a, n.Gateway, port); err != nil {
			t.Errorf("a cannot reach the gateway once back: %v", err)
		}
	})
	if tag == "" {
		return
	}

	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), tag) {
		t.Errorf("namespaces left behind: %s", out)
	}
	out, _ = exec.Command("ip", "-o", "link", "show").CombinedOutput()
	if strings.Contains(string(out), tag) {
		t.Errorf("links left behind: %s", out)
	}
	out, _ = exec.Command("ip", "route", "show").CombinedOutput()
	half := strings.TrimSuffix(subnet, "/24") + "/25" // the bridge's route
	if slices.ContainsFunc(strings.Split(string(out), "\n"), func(l string) bool {
		f := strings.Fields(l)
		return len(f) > 1 && (f[1] == subnet || f[0] == subnet || f[0] == half)
	}) {
		t.Errorf("routes left behind: %s", out)
	}
}

func ipOut(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := exec.Command("ip", args...).CombinedOutput()
	return string(out)
}

// connect opens a TCP connection from inside h's namespaces (bash's
// /dev/tcp), bounded by two seconds.
func connect(h *Host, addr string, port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := h.Command(ctx, "timeout", "2", "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d", addr, port))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
