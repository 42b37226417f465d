package nixtest

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Net is a private network of test hosts, each in its own network
// namespace, joined by a bridge in the test's namespace:
//
//	subnet      a private IPv4 /24, e.g. 10.231.7.0/24
//	.1/25       the bridge: the gateway, where the test's servers listen
//	.10 - .126  the hosts' eth0, one per Attach
//
// Before anything is created, NewNet routes the whole /24 to
// "unreachable" in the test's namespace, so that no packet for the subnet
// can ever leave the machine by the default route: only the bridge's /25
// is more specific. Everything is torn down when the test ends, the guard
// route last.
type Net struct {
	// Gateway is the bridge's address, e.g. 10.231.7.1.
	Gateway string

	subnet netip.Prefix
	tag    string // short, unique per subnet: interface and namespace names

	mu    sync.Mutex
	hosts []*Host
	veth  map[*Host]string
}

// maxNetHosts is how many hosts a Net holds (.10 to .126).
const maxNetHosts = 117

// Subnets: a Net takes the first of 10.231.0.0/24 to 10.231.239.0/24
// whose lock file it can lock, and holds the lock until the test ends. Tests of one run, and of two runs of the
// suite side by side, thus never share a subnet, a namespace or a link
// name; a run that was killed left its lock free, so the next Net on its
// subnet removes what it left.
const (
	subnetLockDir = "/run/nixfleet-nixtest"
	subnetSlots   = 240
)

// NewNet makes a network on a private /24 of its own (Subnet says which).
// It fails the test when iproute2 or the privileges are missing, or when
// every subnet is taken.
func NewNet(t testing.TB) *Net {
	t.Helper()
	for i := range subnetSlots {
		if n := newNetOn(t, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(i), 0}), 24)); n != nil {
			return n
		}
	}
	t.Fatalf("nixtest: all %d subnets of 10.231.0.0/16 are taken (locks in %s)", subnetSlots, subnetLockDir)
	return nil
}

// newNetOn makes the network on p if it can lock p, and returns nil when
// another test holds it.
func newNetOn(t testing.TB, p netip.Prefix) *Net {
	t.Helper()
	Require(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("nixtest: ip (Debian's iproute2) is required: %v", err)
	}
	if !p.Addr().Is4() || p.Bits() != 24 || p.Masked() != p || !p.Addr().IsPrivate() {
		t.Fatalf("nixtest: subnet %s: want a private IPv4 /24 such as 10.231.7.0/24", p)
	}
	if !lockSubnet(t, p) {
		return nil
	}
	a := p.Addr().As4()
	n := &Net{subnet: p, tag: fmt.Sprintf("nf%02x%02x", a[1], a[2]), veth: map[*Host]string{}}
	n.Gateway = netip.AddrFrom4([4]byte{a[0], a[1], a[2], 1}).String()

	// Leftovers of an earlier run that was killed go first.
	n.removeLeftovers()
	// The guard, before anything can carry a packet.
	ipCmd(t, "route", "replace", "unreachable", p.String())
	t.Cleanup(func() {
		n.teardown(t)
		ipQuiet("route", "del", "unreachable", p.String())
	})
	// A bridge takes the lowest MAC address of its ports unless it has
	// one of its own: each Attach would change the gateway's address
	// under the hosts' ARP caches and stall their connections until the
	// entries go stale (some 30 s).
	ipCmd(t, "link", "add", n.bridge(), "address", fmt.Sprintf("02:6e:66:%02x:%02x:01", a[1], a[2]), "type", "bridge")
	ipCmd(t, "addr", "add", n.Gateway+"/25", "dev", n.bridge())
	ipCmd(t, "link", "set", n.bridge(), "up")
	return n
}

func (n *Net) bridge() string { return n.tag + "b" }

// Subnet is the network's /24.
func (n *Net) Subnet() netip.Prefix { return n.subnet }

// Host returns the address of the subnet whose last byte is b.
func (n *Net) Host(b byte) string {
	a := n.subnet.Addr().As4()
	return netip.AddrFrom4([4]byte{a[0], a[1], a[2], b}).String()
}

// lockSubnet takes p's lock file without waiting, held (its descriptor
// open) until the test ends; false when another process holds it. The
// lock goes with the process that holds it, however it ends.
func lockSubnet(t testing.TB, p netip.Prefix) bool {
	t.Helper()
	if err := os.MkdirAll(subnetLockDir, 0o755); err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	name := filepath.Join(subnetLockDir, strings.ReplaceAll(p.Addr().String(), ".", "-")+".lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("nixtest: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return false
		}
		t.Fatalf("nixtest: locking %s: %v", name, err)
	}
	t.Cleanup(func() { f.Close() }) // after the teardown: cleanups run last-in first-out
	return true
}

// Addr is host:port on the gateway, for a server the hosts must reach.
func (n *Net) Addr(port int) string { return fmt.Sprintf("%s:%d", n.Gateway, port) }

// Attach puts h in a new network namespace on the network and returns
// its address; h.Command runs in that namespace from now on. The
// namespace has lo and eth0, with a default route through the gateway.
func (n *Net) Attach(t testing.TB, h *Host) string {
	t.Helper()
	n.mu.Lock()
	i := len(n.hosts)
	if i >= maxNetHosts {
		n.mu.Unlock()
		t.Fatalf("nixtest: a Net holds at most %d hosts", maxNetHosts)
	}
	n.hosts = append(n.hosts, h)
	veth := fmt.Sprintf("%sv%d", n.tag, i)
	n.veth[h] = veth
	n.mu.Unlock()

	a := n.subnet.Addr().As4()
	addr := netip.AddrFrom4([4]byte{a[0], a[1], a[2], byte(10 + i)}).String()
	ns := fmt.Sprintf("%s-%d", n.tag, i)
	ipCmd(t, "netns", "add", ns)
	h.NetNS = ns
	ipCmd(t, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
	ipCmd(t, "link", "set", veth, "master", n.bridge(), "up")
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	ipCmd(t, "-n", ns, "addr", "add", addr+"/25", "dev", "eth0")
	ipCmd(t, "-n", ns, "link", "set", "eth0", "up")
	ipCmd(t, "-n", ns, "route", "add", "default", "via", n.Gateway)
	return addr
}

// SetOnline connects h to the network or cuts it off (its link to the
// bridge down: the host's packets go nowhere, as with a pulled cable).
func (n *Net) SetOnline(t testing.TB, h *Host, online bool) {
	t.Helper()
	n.mu.Lock()
	veth, ok := n.veth[h]
	n.mu.Unlock()
	if !ok {
		t.Fatalf("nixtest: %s is not on the network", h.Name)
	}
	state := "down"
	if online {
		state = "up"
	}
	ipCmd(t, "link", "set", veth, state)
}

// teardown deletes the links (a veth pair goes as a whole), the
// namespaces and the bridge.
func (n *Net) teardown(t testing.TB) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, h := range n.hosts {
		if err := ipQuiet("link", "del", n.veth[h]); err != nil {
			t.Errorf("nixtest: deleting link %s: %v", n.veth[h], err)
		}
		if err := ipQuiet("netns", "del", h.NetNS); err != nil {
			t.Errorf("nixtest: deleting network namespace %s: %v", h.NetNS, err)
		}
	}
	if err := ipQuiet("link", "del", n.bridge()); err != nil {
		t.Errorf("nixtest: deleting bridge %s: %v", n.bridge(), err)
	}
}

// removeLeftovers deletes namespaces and links with this Net's names.
func (n *Net) removeLeftovers() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], n.tag+"-") {
			_ = ipQuiet("netns", "del", f[0])
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show").Output()
	for _, line := range strings.Split(string(out), "\n") {
		// "7: nf0e07v0@if2: <BROADCAST,…"
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], n.tag+"v") {
			_ = ipQuiet("link", "del", strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	_ = ipQuiet("link", "del", n.bridge())
}

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("nixtest: ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func ipQuiet(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
