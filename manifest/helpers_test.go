package manifest_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// fixturePath is the shared two-channel sample fleet (unsigned).
const fixturePath = "../testdata/fleets/two-channels.json"

// Values the tests stamp into the fixture's meta, as `release sign` would.
const (
	testCommit   = "0123456789abcdef0123456789abcdef01234567"
	testSignedAt = "2025-01-15T12:00:00Z"
)

var readFixture = sync.OnceValues(func() ([]byte, error) { return os.ReadFile(fixturePath) })

// loadFixture decodes a fresh copy of the fixture fleet, so callers may
// mutate it freely.
func loadFixture(tb testing.TB) *proto.FleetResolved {
	tb.Helper()
	data, err := readFixture()
	if err != nil {
		tb.Fatal(err)
	}
	f, err := proto.DecodeFleetResolved(data)
	if err != nil {
		tb.Fatalf("decode fixture: %v", err)
	}
	return f
}

// fleetWith returns a fresh fixture fleet changed by mutate (nil: unchanged).
func fleetWith(tb testing.TB, mutate func(*proto.FleetResolved)) *proto.FleetResolved {
	tb.Helper()
	f := loadFixture(tb)
	if mutate != nil {
		mutate(f)
	}
	return f
}

// stamp sets meta the way CI does at signing time.
func stamp(f *proto.FleetResolved, signedAt, commit string) {
	f.Meta.SignedAt = ptr(signedAt)
	f.Meta.CICommit = ptr(commit)
}

// stampedFixture is the fixture stamped with testSignedAt and testCommit.
func stampedFixture(tb testing.TB) *proto.FleetResolved {
	tb.Helper()
	f := loadFixture(tb)
	stamp(f, testSignedAt, testCommit)
	return f
}

// fleetHash is the lowercase hex SHA-256 of the canonical bytes of f, the
// fleetResolvedHash its manifests carry.
func fleetHash(tb testing.TB, f *proto.FleetResolved) string {
	tb.Helper()
	b, err := json.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := trust.Canonicalize(b)
	if err != nil {
		tb.Fatal(err)
	}
	return sha256Hex(c)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// project projects f with its real fleet hash and fails the test on error.
func project(tb testing.TB, f *proto.FleetResolved) []*proto.RolloutManifest {
	tb.Helper()
	ms, err := manifest.Project(f, fleetHash(tb, f))
	if err != nil {
		tb.Fatalf("Project: %v", err)
	}
	return ms
}

// byChannel indexes manifests by channel.
func byChannel(ms []*proto.RolloutManifest) map[string]*proto.RolloutManifest {
	out := make(map[string]*proto.RolloutManifest, len(ms))
	for _, m := range ms {
		out[m.Channel] = m
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// nixBase32 is the alphabet of Nix store path hashes.
const nixBase32 = "0123456789abcdfghijklmnpqrsvwxyz"

// closureFor returns a well-formed, deterministic store path basename for a
// host.
func closureFor(host string) string {
	sum := sha256.Sum256([]byte("closure:" + host))
	h := make([]byte, 32)
	for i := range h {
		h[i] = nixBase32[sum[i]%32]
	}
	name := []byte(host)
	for i, c := range name {
		if !strings.ContainsRune(storeNameChars, rune(c)) {
			name[i] = '_'
		}
	}
	return string(h) + "-nixos-system-" + string(name) + "-24.11"
}

// storeNameChars are the characters of a store path name.
const storeNameChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+-._?="

// sshBlob builds the base64 of an OpenSSH public key blob: string(typ)
// string(key), then extra bytes appended verbatim.
func sshBlob(typ string, key, extra []byte) string {
	var b []byte
	b = binary.BigEndian.AppendUint32(b, uint32(len(typ)))
	b = append(b, typ...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
	b = append(b, key...)
	b = append(b, extra...)
	return base64.StdEncoding.EncodeToString(b)
}

// sshKeyFor returns a deterministic, well-formed "ssh-ed25519 …" line.
func sshKeyFor(host string) string {
	sum := sha256.Sum256([]byte("pubkey:" + host))
	return "ssh-ed25519 " + sshBlob("ssh-ed25519", sum[:], nil) + " root@" + host
}

// addHost adds a well-formed host with a closure and a pubkey to channel,
// and lists it in the channel's last wave (creating one if there is none).
func addHost(f *proto.FleetResolved, name, channel string, tags ...string) {
	if tags == nil {
		tags = []string{}
	}
	f.Hosts[name] = proto.Host{
		System:      "x86_64-linux",
		Tags:        tags,
		Channel:     channel,
		ClosureHash: ptr(closureFor(name)),
		Pubkey:      ptr(sshKeyFor(name)),
	}
	waves := f.Waves[channel]
	if len(waves) == 0 {
		waves = append(waves, proto.Wave{Hosts: []string{}})
	}
	last := &waves[len(waves)-1]
	last.Hosts = append(last.Hosts, name)
	f.Waves[channel] = waves
}
