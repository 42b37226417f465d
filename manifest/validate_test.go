package manifest_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nixfleet/nixfleet/manifest"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/trust"
)

// Names of the fixture's policies.
const (
	stablePolicy = "canary-then-web-then-rest"
	edgePolicy   = "all-at-once"
)

// growTo adds lab hosts to the edge channel until the fleet has n hosts.
func growTo(f *proto.FleetResolved, n int) {
	for i := 0; len(f.Hosts) < n; i++ {
		addHost(f, fmt.Sprintf("extra-%02d", i), "edge", "lab")
	}
}

// selectorJSON decodes a selector from JSON, so that the "and"/"not"
// RawMessage members are set exactly as the fleet decoder sets them.
func selectorJSON(t *testing.T, s string) proto.Selector {
	t.Helper()
	var sel proto.Selector
	if err := json.Unmarshal([]byte(s), &sel); err != nil {
		t.Fatalf("decode selector %s: %v", s, err)
	}
	return sel
}

// addChannel adds a well-formed, empty channel following the edge policy.
func addChannel(f *proto.FleetResolved, name string) {
	f.Channels[name] = proto.Channel{
		RolloutPolicy:          edgePolicy,
		FreshnessWindow:        1440,
		SigningIntervalMinutes: 60,
		Compliance:             proto.Compliance{Frameworks: []string{}, Mode: proto.ComplianceEnforce},
	}
}

func setChannel(f *proto.FleetResolved, name string, change func(*proto.Channel)) {
	c := f.Channels[name]
	change(&c)
	f.Channels[name] = c
}

func setHost(f *proto.FleetResolved, name string, change func(*proto.Host)) {
	h := f.Hosts[name]
	change(&h)
	f.Hosts[name] = h
}

func setPolicy(f *proto.FleetResolved, name string, change func(*proto.RolloutPolicy)) {
	p := f.RolloutPolicies[name]
	change(&p)
	f.RolloutPolicies[name] = p
}

// removeFromWaves drops host from every wave of channel.
func removeFromWaves(f *proto.FleetResolved, channel, host string) {
	for i, w := range f.Waves[channel] {
		kept := []string{}
		for _, h := range w.Hosts {
			if h != host {
				kept = append(kept, h)
			}
		}
		f.Waves[channel][i].Hosts = kept
	}
}

type validateCase struct {
	name   string
	mutate func(t *testing.T, f *proto.FleetResolved)
	// wantErrs holds one substring per expected problem, in the order
	// ValidateFleet reports them; empty means the fleet is valid.
	wantErrs []string
	// wantWarns likewise for warnings.
	wantWarns []string
}

func runValidateCases(t *testing.T, tests []validateCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := loadFixture(t)
			if tt.mutate != nil {
				tt.mutate(t, f)
			}
			warns, err := manifest.ValidateFleet(f)
			checkProblems(t, "warning", warns, tt.wantWarns)
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("ValidateFleet: unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateFleet: no error, want problems %q", tt.wantErrs)
			}
			if !errors.Is(err, manifest.ErrInvalidFleet) {
				t.Errorf("errors.Is(err, ErrInvalidFleet) = false for %v", err)
			}
			var verr *manifest.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %T is not a *ValidationError: %v", err, err)
			}
			checkProblems(t, "problem", verr.Problems, tt.wantErrs)
		})
	}
}

// checkProblems checks that got has exactly one entry per want, in order,
// each containing its want substring.
func checkProblems(t *testing.T, what string, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		ok = strings.Contains(got[i], want[i])
	}
	if !ok {
		t.Errorf("%ss:\n got  %d: %s\n want %d containing: %s", what,
			len(got), strings.Join(quoteAll(got), "\n          "),
			len(want), strings.Join(quoteAll(want), "\n                     "))
	}
}

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

func TestValidateFixture(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		f    *proto.FleetResolved
	}{
		{"unsigned", loadFixture(t)},
		{"stamped", stampedFixture(t)},
	} {
		warns, err := manifest.ValidateFleet(tt.f)
		if err != nil {
			t.Errorf("%s: ValidateFleet: %v", tt.name, err)
		}
		if len(warns) != 0 {
			t.Errorf("%s: unexpected warnings: %q", tt.name, warns)
		}
	}
}

func TestValidateTopLevel(t *testing.T) {
	t.Parallel()
	runValidateCases(t, []validateCase{
		{
			name:     "schemaVersion 2",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { f.SchemaVersion = 2 },
			wantErrs: []string{"schemaVersion is 2, want 1"},
		},
		{
			name:   "hex ciCommit",
			mutate: func(t *testing.T, f *proto.FleetResolved) { f.Meta.CICommit = ptr(testCommit) },
		},
		{
			name:     "ciCommit not hex",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { f.Meta.CICommit = ptr("main") },
			wantErrs: []string{`meta.ciCommit "main" is not a hex commit id`},
		},
		{
			name:   "ciCommit of 7 hex digits",
			mutate: func(t *testing.T, f *proto.FleetResolved) { f.Meta.CICommit = ptr(testCommit[:7]) },
		},
		{
			name:     "ciCommit of 6 hex digits",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { f.Meta.CICommit = ptr(testCommit[:6]) },
			wantErrs: []string{`meta.ciCommit "012345" is not a hex commit id`},
		},
		{
			name:   "ciCommit of 64 hex digits (sha256 repository)",
			mutate: func(t *testing.T, f *proto.FleetResolved) { f.Meta.CICommit = ptr(strings.Repeat("a1", 32)) },
		},
		{
			name:     "ciCommit of 65 hex digits",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { f.Meta.CICommit = ptr(strings.Repeat("a", 65)) },
			wantErrs: []string{"is not a hex commit id"},
		},
		{
			name:     "ciCommit upper case",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { f.Meta.CICommit = ptr(strings.ToUpper(testCommit)) },
			wantErrs: []string{"is not a hex commit id"},
		},
	})
}

func TestValidateHosts(t *testing.T) {
	t.Parallel()
	wrongKey := func(line string) func(t *testing.T, f *proto.FleetResolved) {
		return func(t *testing.T, f *proto.FleetResolved) {
			setHost(f, "web-01", func(h *proto.Host) { h.Pubkey = ptr(line) })
		}
	}
	key32 := []byte(strings.Repeat("k", 32))
	closure := func(c string) func(t *testing.T, f *proto.FleetResolved) {
		return func(t *testing.T, f *proto.FleetResolved) {
			setHost(f, "web-02", func(h *proto.Host) { h.ClosureHash = ptr(c) })
		}
	}
	const hash32 = "6cp643dzvlxxpkgbg5kzmwj47sam9zs2"
	badName := func(name string) validateCase {
		return validateCase{
			name:     fmt.Sprintf("host name %q", name),
			mutate:   func(t *testing.T, f *proto.FleetResolved) { addHost(f, name, "edge", "lab") },
			wantErrs: []string{fmt.Sprintf("host %q: name must be letters, digits, '.', '_' or '-'", name)},
		}
	}
	goodName := func(name string) validateCase {
		return validateCase{
			name:   fmt.Sprintf("host name %q", name),
			mutate: func(t *testing.T, f *proto.FleetResolved) { addHost(f, name, "edge", "lab") },
		}
	}
	runValidateCases(t, []validateCase{
		{
			name: "unknown host channel",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setHost(f, "db-01", func(h *proto.Host) { h.Channel = "nope" })
			},
			wantErrs: []string{`host "db-01": channel "nope" does not exist`},
		},
		{
			name: "empty host channel",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setHost(f, "db-01", func(h *proto.Host) { h.Channel = "" })
			},
			wantErrs: []string{`host "db-01": channel "" does not exist`},
		},
		badName(""),
		badName("-leading-dash"),
		badName(".hidden"),
		badName("has space"),
		badName("a/b"),
		badName("a@b"),
		badName("ünïcode"),
		badName(strings.Repeat("h", 254)),
		goodName(strings.Repeat("h", 253)),
		goodName("web_03.example.com"),
		goodName("0"),
		{name: "closureHash well-formed", mutate: closure(hash32 + "-nixos-system-web-02")},
		{name: "closureHash name with every allowed character", mutate: closure(hash32 + "-a+b._?=-c")},
		{
			name:     "closureHash is a full store path",
			mutate:   closure("/nix/store/" + hash32 + "-nixos-system-web-02"),
			wantErrs: []string{`host "web-02": closureHash "/nix/store/` + hash32 + `-nixos-system-web-02" is not a Nix store path basename`},
		},
		{
			name:     "closureHash without a name",
			mutate:   closure(hash32),
			wantErrs: []string{`host "web-02": closureHash`},
		},
		{
			name:     "closureHash with an empty name",
			mutate:   closure(hash32 + "-"),
			wantErrs: []string{`host "web-02": closureHash`},
		},
		{
			name:     "closureHash 31 characters",
			mutate:   closure(hash32[1:] + "-nixos"),
			wantErrs: []string{`host "web-02": closureHash`},
		},
		{
			name:     "closureHash letter outside nix base32",
			mutate:   closure("e" + hash32[1:] + "-nixos"),
			wantErrs: []string{`host "web-02": closureHash`},
		},
		{
			name:     "closureHash upper case",
			mutate:   closure(strings.ToUpper(hash32) + "-nixos"),
			wantErrs: []string{`host "web-02": closureHash`},
		},
		{
			name:     "closureHash empty",
			mutate:   closure(""),
			wantErrs: []string{`host "web-02": closureHash "" is not a Nix store path basename`},
		},
		{
			name:     "closureHash name with slash",
			mutate:   closure(hash32 + "-a/b"),
			wantErrs: []string{`host "web-02": closureHash`},
		},
		{
			name: "null pubkey (not enrolled)",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setHost(f, "web-01", func(h *proto.Host) { h.Pubkey = nil })
			},
		},
		{name: "pubkey without comment", mutate: wrongKey("ssh-ed25519 " + sshBlob("ssh-ed25519", key32, nil))},
		{name: "pubkey with comment", mutate: wrongKey("ssh-ed25519 " + sshBlob("ssh-ed25519", key32, nil) + " root@web-01 extra words")},
		{
			name:     "pubkey ssh-rsa",
			mutate:   wrongKey("ssh-rsa " + sshBlob("ssh-rsa", key32, nil)),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: "ssh-rsa `},
		},
		{
			name:     "pubkey type only",
			mutate:   wrongKey("ssh-ed25519"),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: "ssh-ed25519" is not an "ssh-ed25519 <base64>" key`},
		},
		{
			name:     "pubkey empty",
			mutate:   wrongKey(""),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: "" is not an "ssh-ed25519 <base64>" key`},
		},
		{
			name:     "pubkey raw base64 of the key (trust.json style)",
			mutate:   wrongKey("ed25519 " + sshBlob("ssh-ed25519", key32, nil)),
			wantErrs: []string{`is not an "ssh-ed25519 <base64>" key`},
		},
		{
			name:     "pubkey garbage base64",
			mutate:   wrongKey("ssh-ed25519 !!!not*base64!!!"),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not base64`},
		},
		{
			name:     "pubkey blob of another type",
			mutate:   wrongKey("ssh-ed25519 " + sshBlob("ssh-rsa", key32, nil)),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name:     "pubkey blob with a 31-byte key",
			mutate:   wrongKey("ssh-ed25519 " + sshBlob("ssh-ed25519", key32[:31], nil)),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name:     "pubkey blob with a 33-byte key",
			mutate:   wrongKey("ssh-ed25519 " + sshBlob("ssh-ed25519", append(key32, 0), nil)),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name:     "pubkey blob with trailing bytes",
			mutate:   wrongKey("ssh-ed25519 " + sshBlob("ssh-ed25519", key32, []byte{0})),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name: "pubkey blob truncated",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				blob := sshBlob("ssh-ed25519", key32, nil)
				wrongKey("ssh-ed25519 "+blob[:len(blob)-8])(t, f)
			},
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name:     "pubkey blob shorter than a length prefix",
			mutate:   wrongKey("ssh-ed25519 AAA="),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name: "pubkey blob ending inside the key's length prefix",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				blob := []byte("\x00\x00\x00\x0bssh-ed25519\x00\x00")
				wrongKey("ssh-ed25519 "+base64.StdEncoding.EncodeToString(blob))(t, f)
			},
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name:     "pubkey blob with a huge length prefix",
			mutate:   wrongKey("ssh-ed25519 " + "/////w=="),
			wantErrs: []string{`host "web-01": pubkey: trust: invalid key: ssh key data is not an ssh-ed25519 public key`},
		},
		{
			name: "host without closureHash is a warning",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setHost(f, "edge-02", func(h *proto.Host) { h.ClosureHash = nil })
			},
			wantWarns: []string{`host "edge-02" has no closureHash; it is not part of any rollout`},
		},
		{
			name: "host without closureHash need not be in a wave",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setHost(f, "edge-02", func(h *proto.Host) { h.ClosureHash = nil })
				removeFromWaves(f, "edge", "edge-02")
				removeFromWaves(f, "stable", "edge-02")
			},
			wantWarns: []string{`host "edge-02" has no closureHash`},
		},
	})
}

func TestValidateChannels(t *testing.T) {
	t.Parallel()
	channelName := func(name string, ok bool) validateCase {
		c := validateCase{
			name:   fmt.Sprintf("channel name %q", name),
			mutate: func(t *testing.T, f *proto.FleetResolved) { addChannel(f, name) },
		}
		if !ok {
			c.wantErrs = []string{fmt.Sprintf("channel %q: name must be letters, digits, '_', '-' and single inner dots (it becomes a git ref)", name)}
		}
		return c
	}
	window := func(name string, fw, signing int, wantErrs ...string) validateCase {
		return validateCase{
			name: name,
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setChannel(f, "stable", func(c *proto.Channel) { c.FreshnessWindow, c.SigningIntervalMinutes = fw, signing })
			},
			wantErrs: wantErrs,
		}
	}
	mode := func(m string, wantErrs ...string) validateCase {
		return validateCase{
			name: fmt.Sprintf("compliance mode %q", m),
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setChannel(f, "edge", func(c *proto.Channel) { c.Compliance.Mode = m })
			},
			wantErrs: wantErrs,
		}
	}
	maxWin := trust.MaxWindowMinutes
	runValidateCases(t, []validateCase{
		{
			name: "unknown rollout policy",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setChannel(f, "edge", func(c *proto.Channel) { c.RolloutPolicy = "nope" })
			},
			wantErrs: []string{`channel "edge": rollout policy "nope" does not exist`},
		},
		channelName("a..b", false),
		channelName("x.lock", false),
		channelName("lock", true),
		channelName("x.locked", true),
		channelName("a/b", false),
		channelName("a@b", false),
		channelName("", false),
		channelName(".a", false),
		channelName("a.", false),
		channelName("-a", false),
		channelName("_a", false),
		channelName("a b", false),
		channelName("a~1", false),
		channelName("a:b", false),
		channelName("a^b", false),
		channelName("a*", false),
		channelName("a[b", false),
		channelName(`a\b`, false),
		channelName("a?b", false),
		channelName("stable\n", false),
		channelName("release-24.11", true),
		channelName("v1.2.3", true),
		channelName("a_b-C", true),
		channelName("9", true),
		window("freshnessWindow 0", 0, 0, `channel "stable": freshnessWindow 0 must be between 1 and 527040 minutes`),
		window("freshnessWindow negative", -5, 0, `channel "stable": freshnessWindow -5 must be between 1 and 527040 minutes`),
		window("freshnessWindow above MaxWindowMinutes", maxWin+1, 60, fmt.Sprintf(`channel "stable": freshnessWindow %d must be between 1 and %d minutes`, maxWin+1, maxWin)),
		window("freshnessWindow MaxWindowMinutes", maxWin, 60),
		window("freshnessWindow 1 without signing interval", 1, 0),
		window("freshnessWindow below 2x signing interval", 119, 60,
			`channel "stable": freshnessWindow (119) must be >= 2 × signingIntervalMinutes (60), so one missed signing run does not strand hosts`),
		window("freshnessWindow equal to signing interval", 60, 60, `freshnessWindow (60) must be >= 2 × signingIntervalMinutes (60)`),
		window("freshnessWindow exactly 2x signing interval", 120, 60),
		window("freshnessWindow just above 2x signing interval", 121, 60),
		window("signing interval negative", 120, -1, `channel "stable": signingIntervalMinutes -1 is negative`),
		mode(""),
		mode(proto.ComplianceDisabled),
		mode(proto.CompliancePermissive),
		mode(proto.ComplianceEnforce),
		mode("strict", `channel "edge": compliance.mode "strict" is not disabled, permissive or enforce`),
		mode("Enforce", `channel "edge": compliance.mode "Enforce" is not disabled, permissive or enforce`),
	})
}

func TestValidatePolicies(t *testing.T) {
	t.Parallel()
	onFailure := func(v string, wantErrs ...string) validateCase {
		return validateCase{
			name: fmt.Sprintf("onHealthFailure %q", v),
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, edgePolicy, func(p *proto.RolloutPolicy) { p.OnHealthFailure = v })
			},
			wantErrs: wantErrs,
		}
	}
	waveSelector := func(t *testing.T, f *proto.FleetResolved, wave int, sel proto.Selector) {
		setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) {
			p.Waves = append([]proto.PolicyWave(nil), p.Waves...)
			p.Waves[wave].Selector = sel
		})
	}
	andNot := func(name, js string, wantErrs ...string) validateCase {
		return validateCase{
			name:     name,
			mutate:   func(t *testing.T, f *proto.FleetResolved) { waveSelector(t, f, 1, selectorJSON(t, js)) },
			wantErrs: wantErrs,
		}
	}
	// gate changes the health gate of the stable channel's policy.
	gate := func(name string, change func(*proto.HealthGate), wantErrs ...string) validateCase {
		return validateCase{
			name: name,
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { change(&p.HealthGate) })
			},
			wantErrs: wantErrs,
		}
	}
	const andNotErr = `rollout policy "canary-then-web-then-rest" wave 1: selector uses "and"/"not", which are resolved at evaluation time and have no meaning in fleet.resolved`
	runValidateCases(t, []validateCase{
		onFailure(proto.OnHealthFailureHalt),
		onFailure(proto.OnHealthFailureRollbackAndHalt),
		onFailure("explode", `rollout policy "all-at-once": onHealthFailure "explode" is not halt or rollback-and-halt`),
		onFailure("", `rollout policy "all-at-once": onHealthFailure "" is not halt or rollback-and-halt`),
		{
			name: "named policy waves",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.Waves[0].Name, p.Waves[1].Name = "canary", "web" })
			},
		},
		{
			name: "policy waves of one name",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.Waves[0].Name, p.Waves[1].Name = "web", "web" })
			},
			wantErrs: []string{`rollout policy "canary-then-web-then-rest" wave 1: name "web" is already wave 0's`},
		},
		{
			name: "policy wave name with a colon",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.Waves[0].Name = "web:1" })
			},
			wantErrs: []string{`rollout policy "canary-then-web-then-rest" wave 0: name "web:1" must be letters, digits`},
		},
		{
			name: "resolved wave name with a space",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["stable"][0].Name = "the canaries"
			},
			wantErrs: []string{`waves.stable[0]: name "the canaries" must be letters, digits`},
		},
		{
			name: "negative policy wave soak",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.Waves[1].SoakMinutes = -5 })
			},
			wantErrs: []string{`rollout policy "canary-then-web-then-rest" wave 1: soakMinutes -5 is negative`},
		},
		{
			name: "zero soak",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.Waves[1].SoakMinutes = 0 })
				f.Waves["stable"][0].SoakMinutes = 0
			},
		},
		{
			name: "negative maxFailures",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.HealthGate.MaxFailures = ptr(-1) })
			},
			wantErrs: []string{`rollout policy "canary-then-web-then-rest": healthGate.maxFailures -1 is negative`},
		},
		{
			name: "zero maxFailures",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.HealthGate.MaxFailures = ptr(0) })
			},
		},
		{
			name: "negative systemdFailedUnits.max",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setPolicy(f, edgePolicy, func(p *proto.RolloutPolicy) {
					p.HealthGate.SystemdFailedUnits = &proto.SystemdFailedUnits{Max: -2}
				})
			},
			wantErrs: []string{`rollout policy "all-at-once": healthGate.systemdFailedUnits.max -2 is negative`},
		},
		gate("minConverged 1", func(g *proto.HealthGate) { g.MinConverged = ptr(1) }),
		gate("minConverged above the wave's size", func(g *proto.HealthGate) { g.MinConverged = ptr(50) }),
		gate("minConverged 0", func(g *proto.HealthGate) { g.MinConverged = ptr(0) },
			`rollout policy "canary-then-web-then-rest": healthGate.minConverged 0 must be at least 1`),
		gate("minConverged negative", func(g *proto.HealthGate) { g.MinConverged = ptr(-2) },
			`rollout policy "canary-then-web-then-rest": healthGate.minConverged -2 must be at least 1`),
		gate("minConvergedPct 1", func(g *proto.HealthGate) { g.MinConvergedPct = ptr(1) }),
		gate("minConvergedPct 100", func(g *proto.HealthGate) { g.MinConvergedPct = ptr(100) }),
		gate("minConvergedPct 0", func(g *proto.HealthGate) { g.MinConvergedPct = ptr(0) },
			`rollout policy "canary-then-web-then-rest": healthGate.minConvergedPct 0 must be between 1 and 100`),
		gate("minConvergedPct negative", func(g *proto.HealthGate) { g.MinConvergedPct = ptr(-5) },
			`rollout policy "canary-then-web-then-rest": healthGate.minConvergedPct -5 must be between 1 and 100`),
		gate("minConvergedPct 101", func(g *proto.HealthGate) { g.MinConvergedPct = ptr(101) },
			`rollout policy "canary-then-web-then-rest": healthGate.minConvergedPct 101 must be between 1 and 100`),
		gate("minConverged and minConvergedPct", func(g *proto.HealthGate) { g.MinConverged, g.MinConvergedPct = ptr(2), ptr(50) }),
		gate("every health-gate number wrong, in order", func(g *proto.HealthGate) {
			g.MaxFailures, g.SystemdFailedUnits = ptr(-1), &proto.SystemdFailedUnits{Max: -1}
			g.MinConverged, g.MinConvergedPct = ptr(0), ptr(0)
		},
			`rollout policy "canary-then-web-then-rest": healthGate.maxFailures -1 is negative`,
			`rollout policy "canary-then-web-then-rest": healthGate.systemdFailedUnits.max -1 is negative`,
			`rollout policy "canary-then-web-then-rest": healthGate.minConverged 0 must be at least 1`,
			`rollout policy "canary-then-web-then-rest": healthGate.minConvergedPct 0 must be between 1 and 100`),
		gate("an analysis", func(g *proto.HealthGate) {
			g.Analysis = []proto.Analysis{{Name: "error-rate", Query: `max(errors{host=~"{{ .HostsRegex }}"})`, SuccessCondition: "result < 0.05", Interval: "1m", Count: 3}}
		}),
		gate("an analysis with a comparison", func(g *proto.HealthGate) {
			g.Analysis = []proto.Analysis{{Name: "error-rate", Query: `max(errors{host=~"{{ .HostsRegex }}"})`, SuccessCondition: "result < 0.05", Interval: "1m", Count: 3,
				Compare: &proto.Comparison{Confidence: "0.95", Effect: "0", MinSamples: 10, Step: "30s", Window: "10m", Worse: proto.WorseHigher}}}
		}),
		gate("a comparison with every problem, in order", func(g *proto.HealthGate) {
			g.Analysis = []proto.Analysis{{Name: "error-rate", Query: "max(errors)", SuccessCondition: "result < 0.05", Interval: "1m", Count: 3,
				Compare: &proto.Comparison{Confidence: "1", Effect: "-1", MinSamples: 2, Step: "1s", Window: "1h", Worse: "up"}}}
		},
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[0]: compare.confidence "1" must be a decimal number from 0.5 to 0.999`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[0]: compare.effect "-1" must be a decimal number of at least 0`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[0]: compare.minSamples 2 must be between 3 and 10000`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[0]: compare.window 1h is more than 1000 steps of 1s`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[0]: compare.worse "up" must be "higher" or "lower"`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[0]: compare: the query must select hosts by {{ .HostsRegex }}, which stands for each group's hosts`),
		gate("analyses with every problem, in order", func(g *proto.HealthGate) {
			g.Analysis = []proto.Analysis{
				{Name: "", Query: "up", SuccessCondition: "result > 0", Interval: "30s", Count: 1},
				{Name: "latency", Query: "{{ .Region }}", SuccessCondition: "p99 < 1", FailureCondition: "result >", Interval: "1d", Count: 0, FailureLimit: -1},
				{Name: "latency", Query: "", SuccessCondition: "result < 1", Interval: "25h", Count: 1001, InconclusiveLimit: -1},
				{Name: "bad name!", Query: "up", SuccessCondition: "result == 1", Interval: "1h", Count: 1, Source: "Team A"},
				{Name: "tenant", Query: "up", SuccessCondition: "result == 1", Interval: "1h", Count: 1, Source: "default"},
				{Name: "tenant-b", Query: "up", SuccessCondition: "result == 1", Interval: "1h", Count: 1, Source: "team-b"},
			}
		},
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[0]: name is empty`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[1]: query: {{ .Region }} is not a placeholder (known: .HostsRegex, .RolloutID, .Channel, .Wave)`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[1]: successCondition "p99 < 1" is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[1]: failureCondition "result >" is not "result <op> <number>" with <op> one of <, <=, >, >=, ==, !=`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[1]: interval "1d" is not a whole number of seconds, minutes or hours like "30s", "5m" or "1h"`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[1]: count 0 must be between 1 and 1000`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[1]: failureLimit -1 is negative`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[2]: name "latency" is already analysis[1]'s`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[2]: query is empty`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[2]: interval "25h" is longer than 24h`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[2]: count 1001 must be between 1 and 1000`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[2]: inconclusiveLimit -1 is negative`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[3]: name "bad name!" must be letters, digits, '.', '_' or '-', at most 40 long`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[3]: source "Team A" must be 1 to 63 of a-z, 0-9, '_' and '-', starting with a letter or digit`,
			`rollout policy "canary-then-web-then-rest": healthGate.analysis[4]: source "default" is reserved: leave source out to query the control plane's default Prometheus`),
		andNot("selector with and", `{"and":[{"tags":["web"]},{"tags":["canary"]}]}`, andNotErr),
		andNot("selector with not", `{"not":{"tags":["db"]}}`, andNotErr),
		andNot("selector with and next to tags", `{"tags":["web"],"and":[{"all":true}]}`, andNotErr),
		andNot("selector with and of one empty selector", `{"all":true,"and":[{}]}`, andNotErr),
		andNot("selector with not of a selector", `{"all":true,"not":{"hosts":["db-01"]}}`, andNotErr),
		// The Nix library's defaults, "and": [] and "not": null, are not
		// combinators (proto.Selector.UsesCombinators); rfcs/0001 §1.6:
		// an optional member that is null means absent.
		andNot("selector with the default empty and", `{"tags":["web"],"and":[]}`),
		andNot("selector with null and/not", `{"tags":["web"],"and":null,"not":null}`),
		{
			name: "policy selector matching nothing",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				waveSelector(t, f, 0, proto.Selector{Tags: []string{"nope"}})
			},
			wantWarns: []string{`rollout policy "canary-then-web-then-rest" wave 0: selector matches no host`},
		},
		{
			name:      "empty policy selector matches nothing",
			mutate:    func(t *testing.T, f *proto.FleetResolved) { waveSelector(t, f, 2, proto.Selector{Channel: ptr("")}) },
			wantWarns: []string{`rollout policy "canary-then-web-then-rest" wave 2: selector matches no host`},
		},
		{
			name: "policy selectors: every rule kind matches",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				waveSelector(t, f, 0, proto.Selector{TagsAny: []string{"nope", "db"}})
				waveSelector(t, f, 1, proto.Selector{Hosts: []string{"web-02"}})
				waveSelector(t, f, 2, proto.Selector{Channel: ptr("edge")})
			},
		},
	})
}

// TestValidateReboots: a policy's reboot step (its bootTimeoutMinutes, a
// wave's reboot true without it) and the hosts' declared boot loaders,
// alone and against the reboot policy of their channel.
func TestValidateReboots(t *testing.T) {
	t.Parallel()
	const (
		timeoutErr = `rollout policy "canary-then-web-then-rest": reboot.bootTimeoutMinutes %d must be between 1 and 1440`
		waveErr    = `rollout policy "canary-then-web-then-rest" wave %d: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes`
		noneErr    = `host %q: channel %q lets the control plane reboot hosts (rollout policy %q), but bootLoader "none" cannot boot once into an entry; only systemd-boot and grub can`
	)
	// reboot sets the stable policy's reboot step and its waves' own
	// settings (nil: the policy's).
	reboot := func(r *proto.Reboot, waves ...*bool) func(f *proto.FleetResolved) {
		return func(f *proto.FleetResolved) {
			setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) {
				p.Reboot = r
				p.Waves = slices.Clone(p.Waves)
				for i, w := range waves {
					p.Waves[i].Reboot = w
				}
			})
		}
	}
	loader := func(host, l string) func(f *proto.FleetResolved) {
		return func(f *proto.FleetResolved) { setHost(f, host, func(h *proto.Host) { h.BootLoader = l }) }
	}
	allowed := &proto.Reboot{Allowed: true, BootTimeoutMinutes: 15}
	notAllowed := &proto.Reboot{BootTimeoutMinutes: 15}
	tc := func(name string, changes []func(*proto.FleetResolved), wantErrs ...string) validateCase {
		return validateCase{
			name: name,
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				for _, c := range changes {
					c(f)
				}
			},
			wantErrs: wantErrs,
		}
	}
	type changes = []func(*proto.FleetResolved)
	runValidateCases(t, []validateCase{
		tc("reboots allowed", changes{reboot(allowed)}),
		tc("reboots allowed with kexec", changes{reboot(&proto.Reboot{Allowed: true, BootTimeoutMinutes: 15, Kexec: true})}),
		tc("reboots not allowed", changes{reboot(notAllowed)}),
		tc("bootTimeoutMinutes 1", changes{reboot(&proto.Reboot{Allowed: true, BootTimeoutMinutes: 1})}),
		tc("bootTimeoutMinutes 1440", changes{reboot(&proto.Reboot{Allowed: true, BootTimeoutMinutes: 1440})}),
		tc("bootTimeoutMinutes 0", changes{reboot(&proto.Reboot{Allowed: true})}, fmt.Sprintf(timeoutErr, 0)),
		tc("bootTimeoutMinutes 1441", changes{reboot(&proto.Reboot{BootTimeoutMinutes: 1441})}, fmt.Sprintf(timeoutErr, 1441)),
		tc("bootTimeoutMinutes negative", changes{reboot(&proto.Reboot{Allowed: true, BootTimeoutMinutes: -5})}, fmt.Sprintf(timeoutErr, -5)),
		tc("a wave that reboots under a policy that does not", changes{reboot(notAllowed, nil, ptr(true))}),
		tc("a wave that does not reboot under a policy that does", changes{reboot(allowed, ptr(false))}),
		tc("a wave's reboot false without the policy's", changes{reboot(nil, ptr(false), ptr(false), ptr(false))}),
		tc("a wave's reboot true without the policy's", changes{reboot(nil, nil, ptr(true), ptr(true))},
			fmt.Sprintf(waveErr, 1), fmt.Sprintf(waveErr, 2)),

		tc("every boot loader, no reboots", changes{loader("canary-01", "systemd-boot"), loader("web-01", "grub"), loader("web-02", "none")}),
		tc("unknown boot loader", changes{loader("web-01", "lilo"), loader("web-02", "Grub")},
			`host "web-01": bootLoader "lilo" is not systemd-boot, grub or none`,
			`host "web-02": bootLoader "Grub" is not systemd-boot, grub or none`),
		tc("supported boot loaders on a channel that reboots",
			changes{reboot(allowed), loader("canary-01", "systemd-boot"), loader("web-01", "grub")}),
		tc("no declared boot loader on a channel that reboots (the agent refuses)", changes{reboot(allowed)}),
		tc("boot loader none on a channel that reboots", changes{reboot(allowed), loader("db-01", "none"), loader("web-01", "none")},
			fmt.Sprintf(noneErr, "db-01", "stable", stablePolicy), fmt.Sprintf(noneErr, "web-01", "stable", stablePolicy)),
		tc("boot loader none on a channel that reboots one wave", changes{reboot(notAllowed, nil, nil, ptr(true)), loader("db-01", "none")},
			fmt.Sprintf(noneErr, "db-01", "stable", stablePolicy)),
		tc("boot loader none on a channel whose every wave says no", changes{reboot(allowed, ptr(false), ptr(false), ptr(false)), loader("db-01", "none")}),
		tc("boot loader none on a channel that does not reboot", changes{reboot(allowed), loader("edge-01", "none")}),
		tc("an unknown boot loader on a channel that reboots: one problem", changes{reboot(allowed), loader("db-01", "lilo")},
			`host "db-01": bootLoader "lilo" is not systemd-boot, grub or none`),
		tc("boot loader none on a channel that reboots all at once", changes{
			func(f *proto.FleetResolved) {
				setPolicy(f, edgePolicy, func(p *proto.RolloutPolicy) { p.Waves, p.Reboot = nil, allowed })
			},
			loader("edge-02", "none"),
		}, fmt.Sprintf(noneErr, "edge-02", "edge", edgePolicy)),
		tc("a resolved wave's reboot true without the policy's",
			changes{func(f *proto.FleetResolved) { f.Waves["stable"][1].Reboot = ptr(true) }},
			"waves.stable[1]: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes"),
		tc("a resolved wave's reboot true with the policy's",
			changes{reboot(notAllowed), func(f *proto.FleetResolved) { f.Waves["stable"][1].Reboot = ptr(true) }}),
		tc("a wave's reboot true without the policy's reboots nothing", changes{reboot(nil, ptr(true)), loader("db-01", "none")},
			fmt.Sprintf(waveErr, 0)),
	})
}

func TestValidateWaves(t *testing.T) {
	t.Parallel()
	runValidateCases(t, []validateCase{
		{
			name:     "host with closure in no wave of its channel",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { removeFromWaves(f, "stable", "db-01") },
			wantErrs: []string{`host "db-01": no wave of channel "stable" lists it, so it would never be rolled out`},
		},
		{
			// stable's last wave still lists edge-01, which must not count.
			name:     "host listed only by another channel's waves",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { removeFromWaves(f, "edge", "edge-01") },
			wantErrs: []string{`host "edge-01": no wave of channel "edge" lists it`},
		},
		{
			name:     "channel with no waves at all",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { delete(f.Waves, "edge") },
			wantErrs: []string{`host "edge-01": no wave of channel "edge"`, `host "edge-02": no wave of channel "edge"`},
		},
		{
			// The reference library writes an empty list for a policy of
			// strategy all-at-once: one wave holding the whole channel.
			name:   "all-at-once channel: an empty wave list",
			mutate: func(t *testing.T, f *proto.FleetResolved) { f.Waves["edge"] = []proto.Wave{} },
		},
		{
			name: "all-at-once channel next to a wave list that misses a host",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["edge"] = []proto.Wave{}
				removeFromWaves(f, "stable", "db-01")
			},
			wantErrs: []string{`host "db-01": no wave of channel "stable" lists it, so it would never be rolled out`},
		},
		{
			// null is an absent member (0001 §1): the channel has no
			// waves, which is not the same as an empty list.
			name:     "null wave list",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { f.Waves["edge"] = nil },
			wantErrs: []string{`host "edge-01": no wave of channel "edge"`, `host "edge-02": no wave of channel "edge"`},
		},
		{
			name: "empty wave list of an unknown channel",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["nope"] = []proto.Wave{}
			},
			wantErrs: []string{`waves: channel "nope" does not exist`},
		},
		{
			name: "wave naming an unknown host",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["stable"][1].Hosts = append(f.Waves["stable"][1].Hosts, "ghost")
			},
			wantErrs: []string{`waves.stable[1]: host "ghost" does not exist`},
		},
		{
			name: "waves for an unknown channel",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["nope"] = []proto.Wave{{Hosts: []string{"web-01", "ghost"}}}
			},
			wantErrs: []string{`waves: channel "nope" does not exist`, `waves.nope[0]: host "ghost" does not exist`},
		},
		{
			name:     "negative wave soak",
			mutate:   func(t *testing.T, f *proto.FleetResolved) { f.Waves["stable"][2].SoakMinutes = -1 },
			wantErrs: []string{`waves.stable[2]: soakMinutes -1 is negative`},
		},
		{
			name: "empty wave",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["edge"] = append([]proto.Wave{{Hosts: []string{}}}, f.Waves["edge"]...)
			},
		},
	})
}

func TestValidateEdges(t *testing.T) {
	t.Parallel()
	withEdges := func(edges ...proto.Edge) func(t *testing.T, f *proto.FleetResolved) {
		return func(t *testing.T, f *proto.FleetResolved) { f.Edges = append(f.Edges, edges...) }
	}
	withChannelEdges := func(edges ...proto.ChannelEdge) func(t *testing.T, f *proto.FleetResolved) {
		return func(t *testing.T, f *proto.FleetResolved) { f.ChannelEdges = append(f.ChannelEdges, edges...) }
	}
	runValidateCases(t, []validateCase{
		{
			name:     "edge gates an unknown host",
			mutate:   withEdges(proto.Edge{Gates: "ghost", Gated: "web-01"}),
			wantErrs: []string{`edges[1]: gates host "ghost" does not exist`},
		},
		{
			name:     "edge gated is an unknown host",
			mutate:   withEdges(proto.Edge{Gates: "web-01", Gated: "ghost"}),
			wantErrs: []string{`edges[1]: gated host "ghost" does not exist`},
		},
		{
			name:     "self edge",
			mutate:   withEdges(proto.Edge{Gates: "db-01", Gated: "db-01"}),
			wantErrs: []string{`edges[1]: host "db-01" gates itself`},
		},
		{
			name:     "cross-channel edge",
			mutate:   withEdges(proto.Edge{Gates: "web-01", Gated: "edge-01"}),
			wantErrs: []string{`edges[1]: "web-01" (channel "stable") and "edge-01" (channel "edge") are on different channels; use channelEdges to order channels`},
		},
		{
			name:     "two-host cycle",
			mutate:   withEdges(proto.Edge{Gates: "web-02", Gated: "web-01"}),
			wantErrs: []string{"edges form a cycle: web-01 -> web-02 -> web-01"},
		},
		{
			// A cycle across waves has an edge against the wave order
			// too; both are reported.
			name:   "three-host cycle, reported from the smallest name",
			mutate: withEdges(proto.Edge{Gates: "web-02", Gated: "db-01"}, proto.Edge{Gates: "db-01", Gated: "web-01"}),
			wantErrs: []string{
				`edges[2]: "db-01" (wave 2 of channel "stable") gates "web-01" (wave 1)`,
				"edges form a cycle: db-01 -> web-01 -> web-02 -> db-01",
			},
		},
		{
			// Two cycles through canary-01: successors are tried in name
			// order, whatever the order of the edges.
			name: "cycle choice follows sorted successors",
			mutate: withEdges(
				proto.Edge{Gates: "canary-01", Gated: "web-02"},
				proto.Edge{Gates: "canary-01", Gated: "db-01"},
				proto.Edge{Gates: "web-02", Gated: "canary-01"},
				proto.Edge{Gates: "db-01", Gated: "canary-01"},
			),
			wantErrs: []string{
				`edges[3]: "web-02" (wave 1 of channel "stable") gates "canary-01" (wave 0)`,
				`edges[4]: "db-01" (wave 2 of channel "stable") gates "canary-01" (wave 0)`,
				"edges form a cycle: canary-01 -> db-01 -> canary-01",
			},
		},
		{
			name: "cycle reached through a tail",
			mutate: withEdges(
				proto.Edge{Gates: "canary-01", Gated: "db-01"},
				proto.Edge{Gates: "db-01", Gated: "web-01"},
				proto.Edge{Gates: "web-02", Gated: "db-01"},
			),
			wantErrs: []string{
				`edges[2]: "db-01" (wave 2 of channel "stable") gates "web-01" (wave 1)`,
				"edges form a cycle: db-01 -> web-01 -> web-02 -> db-01",
			},
		},
		{
			name: "diamond is not a cycle",
			mutate: withEdges(
				proto.Edge{Gates: "canary-01", Gated: "web-01"},
				proto.Edge{Gates: "canary-01", Gated: "web-02"},
				proto.Edge{Gates: "web-01", Gated: "db-01"},
				proto.Edge{Gates: "web-02", Gated: "db-01"},
			),
		},
		{
			name:   "duplicate edge is not a cycle",
			mutate: withEdges(proto.Edge{Gates: "web-01", Gated: "web-02"}),
		},
		{
			name: "edges of two channels",
			mutate: withEdges(
				proto.Edge{Gates: "edge-02", Gated: "edge-01"},
				proto.Edge{Gates: "web-02", Gated: "db-01"},
			),
		},
		{
			name:   "edge within one wave",
			mutate: withEdges(proto.Edge{Gates: "edge-01", Gated: "edge-02"}),
		},
		{
			name:   "edge from wave 0 to wave 1",
			mutate: withEdges(proto.Edge{Gates: "canary-01", Gated: "web-01"}),
		},
		{
			name:   "edge from wave 0 to wave 2",
			mutate: withEdges(proto.Edge{Gates: "canary-01", Gated: "db-01"}),
		},
		{
			name:   "edge from wave 2 to wave 1",
			mutate: withEdges(proto.Edge{Gates: "db-01", Gated: "web-02"}),
			wantErrs: []string{
				`edges[1]: "db-01" (wave 2 of channel "stable") gates "web-02" (wave 1), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave`,
			},
		},
		{
			name: "edges from wave 1 and wave 2 to wave 0, each reported",
			mutate: withEdges(
				proto.Edge{Gates: "web-01", Gated: "canary-01"},
				proto.Edge{Gates: "canary-01", Gated: "web-02"},
				proto.Edge{Gates: "db-01", Gated: "canary-01"},
			),
			wantErrs: []string{
				`edges[1]: "web-01" (wave 1 of channel "stable") gates "canary-01" (wave 0), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave`,
				`edges[3]: "db-01" (wave 2 of channel "stable") gates "canary-01" (wave 0), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave`,
			},
		},
		{
			// The fixture's wave lists are fleet-wide and name canary-01
			// in all three waves of stable: its wave is the first, 0.
			name: "a host's wave is the first that lists it",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["stable"][0].Hosts = append(f.Waves["stable"][0].Hosts, "db-01")
				withEdges(proto.Edge{Gates: "db-01", Gated: "web-01"})(t, f)
			},
		},
		{
			// stable's waves list edge-01 too (wave 2), which must not
			// count: edge-01 is on edge, where it is in wave 1.
			name: "the wave is counted in the hosts' own channel",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				removeFromWaves(f, "edge", "edge-01")
				f.Waves["edge"] = append(f.Waves["edge"], proto.Wave{Hosts: []string{"edge-01"}})
				withEdges(proto.Edge{Gates: "edge-01", Gated: "edge-02"})(t, f)
			},
			wantErrs: []string{
				`edges[1]: "edge-01" (wave 1 of channel "edge") gates "edge-02" (wave 0), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave`,
			},
		},
		{
			name: "a host no wave lists is not checked against waves",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				setHost(f, "db-01", func(h *proto.Host) { h.ClosureHash = nil })
				removeFromWaves(f, "stable", "db-01")
				withEdges(proto.Edge{Gates: "db-01", Gated: "canary-01"}, proto.Edge{Gates: "web-02", Gated: "db-01"})(t, f)
			},
			wantWarns: []string{`host "db-01" has no closureHash; it is not part of any rollout`},
		},
		{
			// Every host of an all-at-once channel is in wave 0: an edge
			// between two of them is within the one wave.
			name: "edges within an all-at-once channel",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["stable"] = []proto.Wave{}
				withEdges(proto.Edge{Gates: "db-01", Gated: "canary-01"}, proto.Edge{Gates: "web-02", Gated: "db-01"})(t, f)
			},
		},
		{
			name: "a cycle within an all-at-once channel",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.Waves["stable"] = []proto.Wave{}
				withEdges(proto.Edge{Gates: "web-02", Gated: "web-01"})(t, f)
			},
			wantErrs: []string{"edges form a cycle: web-01 -> web-02 -> web-01"},
		},
		{
			// Only the channel rule applies to an edge across channels.
			name:     "cross-channel edge is not checked against waves",
			mutate:   withEdges(proto.Edge{Gates: "db-01", Gated: "edge-01"}),
			wantErrs: []string{`edges[1]: "db-01" (channel "stable") and "edge-01" (channel "edge") are on different channels`},
		},
		{
			name:     "channel edge gates an unknown channel",
			mutate:   withChannelEdges(proto.ChannelEdge{Gates: "nope", Gated: "stable"}),
			wantErrs: []string{`channelEdges[1]: gates channel "nope" does not exist`},
		},
		{
			name:     "channel edge gated is an unknown channel",
			mutate:   withChannelEdges(proto.ChannelEdge{Gates: "edge", Gated: "nope"}),
			wantErrs: []string{`channelEdges[1]: gated channel "nope" does not exist`},
		},
		{
			name:     "channel self edge",
			mutate:   withChannelEdges(proto.ChannelEdge{Gates: "stable", Gated: "stable"}),
			wantErrs: []string{`channelEdges[1]: channel "stable" gates itself`},
		},
		{
			name:     "channel cycle",
			mutate:   withChannelEdges(proto.ChannelEdge{Gates: "stable", Gated: "edge"}),
			wantErrs: []string{"channelEdges form a cycle: edge -> stable -> edge"},
		},
		{
			name: "three-channel cycle",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				addChannel(f, "beta")
				withChannelEdges(proto.ChannelEdge{Gates: "stable", Gated: "beta"}, proto.ChannelEdge{Gates: "beta", Gated: "edge"})(t, f)
			},
			wantErrs: []string{"channelEdges form a cycle: beta -> edge -> stable -> beta"},
		},
		{
			name: "channel chain is not a cycle",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				addChannel(f, "beta")
				withChannelEdges(proto.ChannelEdge{Gates: "beta", Gated: "stable"}, proto.ChannelEdge{Gates: "edge", Gated: "beta"})(t, f)
			},
		},
	})
}

func TestValidateBudgets(t *testing.T) {
	t.Parallel()
	// budget sets budget i (0: tags web, 3 hosts; 1: all hosts).
	budget := func(i int, b proto.DisruptionBudget) func(t *testing.T, f *proto.FleetResolved) {
		return func(t *testing.T, f *proto.FleetResolved) { f.DisruptionBudgets[i] = b }
	}
	all := proto.Selector{All: true}
	web := proto.Selector{Tags: []string{"web"}}
	pctOf := func(name string, hosts, pct int, wantErrs, wantWarns []string) validateCase {
		return validateCase{
			name: name,
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				growTo(f, hosts)
				f.DisruptionBudgets[1] = proto.DisruptionBudget{Selector: all, MaxInFlightPct: ptr(pct)}
			},
			wantErrs:  wantErrs,
			wantWarns: wantWarns,
		}
	}
	const tight = manifest.TightBudgetHosts
	runValidateCases(t, []validateCase{
		{
			name:     "maxInFlight 0",
			mutate:   budget(0, proto.DisruptionBudget{Selector: web, MaxInFlight: ptr(0)}),
			wantErrs: []string{"disruptionBudgets[0]: maxInFlight 0 can never admit a host"},
		},
		{
			name:     "maxInFlight negative",
			mutate:   budget(0, proto.DisruptionBudget{Selector: web, MaxInFlight: ptr(-3)}),
			wantErrs: []string{"disruptionBudgets[0]: maxInFlight -3 can never admit a host"},
		},
		{
			name:   "maxInFlight above the host count",
			mutate: budget(0, proto.DisruptionBudget{Selector: web, MaxInFlight: ptr(100)}),
		},
		{
			name:     "maxInFlightPct 0",
			mutate:   budget(1, proto.DisruptionBudget{Selector: all, MaxInFlightPct: ptr(0)}),
			wantErrs: []string{"disruptionBudgets[1]: maxInFlightPct 0 must be between 1 and 100"},
		},
		{
			name:     "maxInFlightPct negative",
			mutate:   budget(1, proto.DisruptionBudget{Selector: all, MaxInFlightPct: ptr(-10)}),
			wantErrs: []string{"disruptionBudgets[1]: maxInFlightPct -10 must be between 1 and 100"},
		},
		{
			name:     "maxInFlightPct 101",
			mutate:   budget(1, proto.DisruptionBudget{Selector: all, MaxInFlightPct: ptr(101)}),
			wantErrs: []string{"disruptionBudgets[1]: maxInFlightPct 101 must be between 1 and 100"},
		},
		{
			name:   "maxInFlightPct 100",
			mutate: budget(1, proto.DisruptionBudget{Selector: all, MaxInFlightPct: ptr(100)}),
		},
		{
			name:     "maxInFlightPct rounds down to 0 (16% of 6 hosts)",
			mutate:   budget(1, proto.DisruptionBudget{Selector: all, MaxInFlightPct: ptr(16)}),
			wantErrs: []string{"disruptionBudgets[1]: maxInFlightPct 16 of 6 hosts rounds down to 0 and can never admit a host"},
		},
		{
			name:   "maxInFlightPct exactly one host (17% of 6 hosts)",
			mutate: budget(1, proto.DisruptionBudget{Selector: all, MaxInFlightPct: ptr(17)}),
		},
		pctOf("5% of 10 hosts", 10, 5,
			[]string{"disruptionBudgets[1]: maxInFlightPct 5 of 10 hosts rounds down to 0 and can never admit a host"}, nil),
		pctOf("9% of 10 hosts", 10, 9, []string{"maxInFlightPct 9 of 10 hosts rounds down to 0"}, nil),
		pctOf("10% of 10 hosts admits one", 10, 10, nil,
			[]string{"disruptionBudgets[1]: admits one host at a time across 10 hosts; rollouts through it will be slow"}),
		pctOf("20% of 10 hosts", 10, 20, nil, nil),
		{
			name: "maxInFlightPct on a selector matching nothing",
			mutate: budget(1, proto.DisruptionBudget{
				Selector: proto.Selector{Tags: []string{"nope"}}, MaxInFlightPct: ptr(5),
			}),
			wantWarns: []string{"disruptionBudgets[1]: selector matches no host"},
		},
		{
			name:      "budget selector matching nothing",
			mutate:    budget(0, proto.DisruptionBudget{Selector: proto.Selector{Hosts: []string{"ghost"}}, MaxInFlight: ptr(1)}),
			wantWarns: []string{"disruptionBudgets[0]: selector matches no host"},
		},
		{
			name:      "empty budget selector",
			mutate:    budget(0, proto.DisruptionBudget{MaxInFlight: ptr(1)}),
			wantWarns: []string{"disruptionBudgets[0]: selector matches no host"},
		},
		{
			name:      "budget without limits",
			mutate:    budget(1, proto.DisruptionBudget{Selector: all}),
			wantWarns: []string{"disruptionBudgets[1]: sets neither maxInFlight nor maxInFlightPct, so it limits nothing"},
		},
		{
			name: "maxInFlight 1 over TightBudgetHosts hosts",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				growTo(f, tight)
				budget(1, proto.DisruptionBudget{Selector: all, MaxInFlight: ptr(1)})(t, f)
			},
			wantWarns: []string{fmt.Sprintf("disruptionBudgets[1]: admits one host at a time across %d hosts; rollouts through it will be slow", tight)},
		},
		{
			name: "maxInFlight 1 over TightBudgetHosts-1 hosts",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				growTo(f, tight-1)
				budget(1, proto.DisruptionBudget{Selector: all, MaxInFlight: ptr(1)})(t, f)
			},
		},
		{
			name: "maxInFlight 2 over TightBudgetHosts hosts",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				growTo(f, tight)
				budget(1, proto.DisruptionBudget{Selector: all, MaxInFlight: ptr(2)})(t, f)
			},
		},
		{
			name: "both limits: the tighter one decides",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				growTo(f, 20)
				budget(1, proto.DisruptionBudget{Selector: all, MaxInFlight: ptr(5), MaxInFlightPct: ptr(5)})(t, f)
			},
			wantWarns: []string{"disruptionBudgets[1]: admits one host at a time across 20 hosts"},
		},
		{
			name: "budget selector with and",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				budget(0, proto.DisruptionBudget{Selector: selectorJSON(t, `{"and":[{"tags":["web"]}]}`), MaxInFlight: ptr(1)})(t, f)
			},
			wantErrs: []string{`disruptionBudgets[0]: selector uses "and"/"not"`},
		},
		{
			name: "budget selector with not",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				budget(1, proto.DisruptionBudget{Selector: selectorJSON(t, `{"all":true,"not":{"tags":["db"]}}`), MaxInFlightPct: ptr(50)})(t, f)
			},
			wantErrs: []string{`disruptionBudgets[1]: selector uses "and"/"not"`},
		},
		{
			// proto rule 4: an optional member that is null means absent.
			name: "budget selector with null and/not",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				budget(1, proto.DisruptionBudget{Selector: selectorJSON(t, `{"all":true,"and":null,"not":null}`), MaxInFlightPct: ptr(50)})(t, f)
			},
		},
		{
			name: "no budgets at all",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets = nil
			},
		},
		{
			name: "named budgets",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets[0].Name = "web"
				f.DisruptionBudgets[1].Name = "fleet-wide_1.0"
			},
		},
		{
			name: "budget name with a space",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets[0].Name = "web tier"
			},
			wantErrs: []string{`disruptionBudgets[0]: name "web tier" must be letters, digits, '.', '_' or '-', at most 40 long`},
		},
		{
			name: "budget name too long",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets[0].Name = strings.Repeat("w", manifest.MaxLabelLen+1)
			},
			wantErrs: []string{"disruptionBudgets[0]: name \"" + strings.Repeat("w", manifest.MaxLabelLen+1) + "\" must be"},
		},
		{
			name: "budget name starting with a dash",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets[0].Name = "-web"
			},
			wantErrs: []string{`disruptionBudgets[0]: name "-web" must be`},
		},
		{
			name: "two budgets of one name",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets[0].Name = "cap"
				f.DisruptionBudgets[1].Name = "cap"
			},
			wantErrs: []string{`disruptionBudgets[1]: is called "cap", like disruptionBudgets[0]; budget names must be unique`},
		},
		{
			name: "a name equal to another budget's short form",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets[0].Name = "all" // budget 1 selects all: its short form is "all"
			},
			wantErrs: []string{`disruptionBudgets[1]: is called "all", like disruptionBudgets[0]; budget names must be unique`},
		},
		{
			name: "unnamed budgets of one selector are one budget",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets = append(f.DisruptionBudgets, proto.DisruptionBudget{Selector: web, MaxInFlight: ptr(2)})
			},
		},
		{
			name: "unnamed budgets whose short forms coincide",
			mutate: func(t *testing.T, f *proto.FleetResolved) {
				f.DisruptionBudgets = append(f.DisruptionBudgets,
					proto.DisruptionBudget{Selector: proto.Selector{Hosts: []string{"a", "b", "c", "d"}}, MaxInFlight: ptr(1)},
					proto.DisruptionBudget{Selector: proto.Selector{Hosts: []string{"a", "b", "c", "e"}}, MaxInFlight: ptr(1)})
			},
			wantWarns: []string{
				`disruptionBudgets[3]: is called "hosts=a,b,c,+1", like disruptionBudgets[2]; give them names`,
				"disruptionBudgets[2]: selector matches no host", "disruptionBudgets[3]: selector matches no host",
			},
		},
	})
}

// TestValidateAllProblemsAtOnce checks that problems of every section are
// reported together, in a fixed order, on every run.
func TestValidateAllProblemsAtOnce(t *testing.T) {
	t.Parallel()
	broken := func() *proto.FleetResolved {
		f := loadFixture(t)
		f.SchemaVersion = 2
		setHost(f, "web-02", func(h *proto.Host) { h.ClosureHash = ptr("not-a-store-path") })
		setHost(f, "db-01", func(h *proto.Host) { h.Channel = "nope" })
		setHost(f, "edge-02", func(h *proto.Host) { h.ClosureHash = nil })
		setChannel(f, "stable", func(c *proto.Channel) { c.FreshnessWindow = 0 })
		setChannel(f, "edge", func(c *proto.Channel) { c.Compliance.Mode = "strict" })
		setPolicy(f, edgePolicy, func(p *proto.RolloutPolicy) { p.OnHealthFailure = "" })
		setPolicy(f, stablePolicy, func(p *proto.RolloutPolicy) { p.HealthGate.MinConvergedPct = ptr(0) })
		f.Waves["ghost-channel"] = []proto.Wave{{Hosts: []string{"web-01"}}}
		f.Waves["stable"][1].Hosts = append(f.Waves["stable"][1].Hosts, "ghost")
		removeFromWaves(f, "edge", "edge-01")
		f.Edges = append(f.Edges,
			proto.Edge{Gates: "web-01", Gated: "web-01"},
			proto.Edge{Gates: "web-02", Gated: "web-01"},
			proto.Edge{Gates: "web-02", Gated: "canary-01"},
		)
		f.ChannelEdges = append(f.ChannelEdges, proto.ChannelEdge{Gates: "edge", Gated: "edge"})
		f.DisruptionBudgets[1].MaxInFlightPct = ptr(0)
		f.DisruptionBudgets = append(f.DisruptionBudgets, proto.DisruptionBudget{Selector: proto.Selector{Tags: []string{"nope"}}})
		return f
	}
	wantProblems := []string{
		"schemaVersion is 2, want 1",
		`host "db-01": channel "nope" does not exist`,
		`host "web-02": closureHash "not-a-store-path" is not a Nix store path basename`,
		`channel "edge": compliance.mode "strict" is not disabled, permissive or enforce`,
		`channel "stable": freshnessWindow 0 must be between 1 and 527040 minutes`,
		`rollout policy "all-at-once": onHealthFailure "" is not halt or rollback-and-halt`,
		`rollout policy "canary-then-web-then-rest": healthGate.minConvergedPct 0 must be between 1 and 100`,
		`waves: channel "ghost-channel" does not exist`,
		`waves.stable[1]: host "ghost" does not exist`,
		`host "edge-01": no wave of channel "edge" lists it, so it would never be rolled out`,
		`edges[1]: host "web-01" gates itself`,
		`edges[3]: "web-02" (wave 1 of channel "stable") gates "canary-01" (wave 0), which would wait for a later wave; a host may only wait for hosts of its own or an earlier wave`,
		"edges form a cycle: web-01 -> web-02 -> web-01",
		`channelEdges[1]: channel "edge" gates itself`,
		"disruptionBudgets[1]: maxInFlightPct 0 must be between 1 and 100",
	}
	wantWarnings := []string{
		`host "edge-02" has no closureHash; it is not part of any rollout`,
		"disruptionBudgets[2]: selector matches no host",
		"disruptionBudgets[2]: sets neither maxInFlight nor maxInFlightPct, so it limits nothing",
	}
	// From parallelHosts hosts on, the hosts are checked on a goroutine of
	// their own: the same problems come in the same order. The hosts
	// added are valid, unnamed by any check, and sort among the others.
	large := func() *proto.FleetResolved {
		f := broken()
		stable := f.Waves["stable"]
		last := &stable[len(stable)-1]
		for i := range 5000 {
			name := fmt.Sprintf("filler-%04d", i)
			f.Hosts[name] = proto.Host{System: "x86_64-linux", Channel: "stable",
				ClosureHash: ptr(fmt.Sprintf("%032d-nixos-system-%s", 0, name)), Tags: []string{}}
			last.Hosts = append(last.Hosts, name)
		}
		return f
	}
	var first string
	for run := range 20 {
		fleet := broken
		if run%2 == 1 {
			fleet = large
		}
		warns, err := manifest.ValidateFleet(fleet())
		if !errors.Is(err, manifest.ErrInvalidFleet) {
			t.Fatalf("run %d: errors.Is(err, ErrInvalidFleet) = false, err = %v", run, err)
		}
		var verr *manifest.ValidationError
		if !errors.As(err, &verr) {
			t.Fatalf("run %d: %T is not a *ValidationError", run, err)
		}
		if diff := cmp.Diff(wantProblems, verr.Problems); diff != "" {
			t.Fatalf("run %d: problems (-want +got):\n%s", run, diff)
		}
		if diff := cmp.Diff(wantWarnings, warns); diff != "" {
			t.Fatalf("run %d: warnings (-want +got):\n%s", run, diff)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, fmt.Sprintf("invalid fleet: %d problem(s): ", len(wantProblems))) {
			t.Errorf("Error() = %q, want the problem count first", msg)
		}
		for _, p := range wantProblems {
			if !strings.Contains(msg, p) {
				t.Errorf("Error() does not mention %q", p)
			}
		}
		if run == 0 {
			first = msg
		} else if msg != first {
			t.Fatalf("run %d: Error() differs from run 0:\n%s\n%s", run, msg, first)
		}
	}
}

// TestValidateDoesNotMutate checks that validation leaves the fleet alone.
func TestValidateDoesNotMutate(t *testing.T) {
	t.Parallel()
	f := loadFixture(t)
	f.Edges = append(f.Edges, proto.Edge{Gates: "web-01", Gated: "db-01"}, proto.Edge{Gates: "canary-01", Gated: "web-01"})
	before, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manifest.ValidateFleet(f); err != nil {
		t.Fatal(err)
	}
	after, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(before), string(after)); diff != "" {
		t.Fatalf("ValidateFleet changed the fleet (-before +after):\n%s", diff)
	}
}

// TestValidateMinimalFleet checks the smallest fleets: without a channel a
// fleet is invalid (no freshness window could apply to it); one channel and
// its policy, with no host, is valid, and absent maps and lists do not trip
// validation.
func TestValidateMinimalFleet(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		doc      string
		wantErrs []string
	}{
		{
			name:     "no channel",
			doc:      `{"schemaVersion":1,"hosts":{},"channels":{},"meta":{"schemaVersion":1,"signedAt":null,"ciCommit":null}}`,
			wantErrs: []string{"the fleet declares no channel"},
		},
		{
			name: "one empty channel",
			doc: `{"schemaVersion":1,"hosts":{},"channels":{"main":{"rolloutPolicy":"p","freshnessWindow":60}},` +
				`"rolloutPolicies":{"p":{"onHealthFailure":"halt"}},"meta":{}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := proto.DecodeFleetResolved([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			warns, err := manifest.ValidateFleet(f)
			if len(warns) != 0 {
				t.Errorf("unexpected warnings %q", warns)
			}
			var got []string
			var verr *manifest.ValidationError
			if errors.As(err, &verr) {
				got = verr.Problems
			} else if err != nil {
				t.Fatalf("error %T is not a *ValidationError: %v", err, err)
			}
			checkProblems(t, "problem", got, tt.wantErrs)
		})
	}
}

// TestValidateNullCombinators decodes a whole document whose selectors carry
// "and": null and "not": null. proto's wire rule 4 says an optional member
// that is null means absent, so the fleet is as valid as the fixture.
func TestValidateNullCombinators(t *testing.T) {
	t.Parallel()
	data, err := readFixture()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, old, new string }{
		{"policy wave", `"selector": { "tags": ["canary"] }`, `"selector": { "tags": ["canary"], "and": null }`},
		{"budget", `"selector": { "all": true }, "maxInFlightPct": 50`, `"selector": { "all": true, "not": null }, "maxInFlightPct": 50`},
	} {
		doc := bytes.Replace(data, []byte(tt.old), []byte(tt.new), 1)
		if bytes.Equal(doc, data) {
			t.Fatalf("%s: fixture does not contain %s", tt.name, tt.old)
		}
		f, err := proto.DecodeFleetResolved(doc)
		if err != nil {
			t.Fatalf("%s: decode: %v", tt.name, err)
		}
		if _, err := manifest.ValidateFleet(f); err != nil {
			t.Errorf("%s: ValidateFleet: %v", tt.name, err)
		}
	}
}

// TestValidateWaveListAsWritten: the difference between an empty wave list
// and a missing one is made by the decoder, from the JSON as written: []
// is a channel rolled out all at once, null and an absent member are a
// channel without waves.
func TestValidateWaveListAsWritten(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		edge      string // waves.edge as written; "" drops the member
		allAtOnce bool
	}{
		{name: "empty list", edge: `[]`, allAtOnce: true},
		{name: "null", edge: `null`},
		{name: "absent", edge: ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data, err := readFixture()
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]json.RawMessage
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			var waves map[string]json.RawMessage
			if err := json.Unmarshal(doc["waves"], &waves); err != nil {
				t.Fatal(err)
			}
			if tt.edge == "" {
				delete(waves, "edge")
			} else {
				waves["edge"] = json.RawMessage(tt.edge)
			}
			if doc["waves"], err = json.Marshal(waves); err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			f, err := proto.DecodeFleetResolved(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := manifest.AllAtOnce(f, "edge"); got != tt.allAtOnce {
				t.Errorf("AllAtOnce = %v, want %v", got, tt.allAtOnce)
			}
			_, err = manifest.ValidateFleet(f)
			switch {
			case tt.allAtOnce && err != nil:
				t.Errorf("ValidateFleet: %v, want a valid fleet", err)
			case !tt.allAtOnce && (err == nil || !strings.Contains(err.Error(), `host "edge-01": no wave of channel "edge" lists it`)):
				t.Errorf("ValidateFleet: %v, want edge-01 reported in no wave", err)
			}
		})
	}
}
