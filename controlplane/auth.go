package controlplane

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/controlplane/dashboard"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
	"github.com/nixfleet/nixfleet/trust"
)

// Operator roles (rfcs/0007 §Authentication 2). Each may do what the one
// before it may, and more: a viewer reads; an operator also pauses,
// resumes, cancels and rolls back; an approver also approves waves and
// breaks freezes (change control: the people who may let a change through
// a gate are named apart from those who run rollouts).
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
	RoleApprover = "approver"
)

// roleActs reports whether a role may file the intents that steer a
// rollout (pause, resume, cancel, rollback).
func roleActs(role string) bool { return role == RoleOperator || role == RoleApprover }

// roleApproves reports whether a role may approve a wave and break a
// freeze.
func roleApproves(role string) bool { return role == RoleApprover }

// mayFile checks that an operator of a role may file an intent of a kind
// (a kind that is no intent counts as one of an operator's, to be refused
// by checkIntentKind after). dev (--insecure-dev, where nobody is
// authenticated) may file every kind.
func mayFile(name, role string, dev bool, kind string) *codes.Error {
	switch {
	case dev:
		return nil
	case reconciler.ForApprovers(kind) && !roleApproves(role):
		return codes.Errorf(codes.Forbidden, "operator %s has role %s; %s needs role approver", name, role, kind)
	case !roleActs(role):
		return codes.Errorf(codes.Forbidden, "operator %s has role %s; acting on rollouts needs role operator or approver", name, role)
	}
	return nil
}

// Operator is an entry of the operators file.
type Operator struct {
	Name string `json:"name"`
	// Key is the operator's ed25519 public key: an OpenSSH line
	// ("ssh-ed25519 AAAA…") or {"algorithm": "ed25519", "public": base64}
	// as `nixfleet keygen` writes it.
	Key json.RawMessage `json:"key"`
	// Role is "viewer" (read), "operator" (read and act) or "approver"
	// (read, act, approve waves and break freezes).
	Role string `json:"role"`
}

// LoadOperators reads the operators file: a JSON array of Operator.
func LoadOperators(path string) ([]Operator, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if _, err := proto.CheckSyntax(append([]byte(`{"operators":`), append(data, '}')...), ""); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var ops []Operator
	if err := json.Unmarshal(data, &ops); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for i, op := range ops {
		if op.Name == "" || seen[op.Name] {
			return nil, fmt.Errorf("%s: operator %d: missing or duplicate name %q", path, i, op.Name)
		}
		seen[op.Name] = true
		if op.Role != RoleViewer && !roleActs(op.Role) {
			return nil, fmt.Errorf("%s: operator %q: role %q is not viewer, operator or approver", path, op.Name, op.Role)
		}
		if _, err := operatorKey(op.Key); err != nil {
			return nil, fmt.Errorf("%s: operator %q: %w", path, op.Name, err)
		}
	}
	return ops, nil
}

func operatorKey(raw json.RawMessage) (ed25519.PublicKey, error) {
	var line string
	if err := json.Unmarshal(raw, &line); err == nil {
		return trust.ParseSSHEd25519(line)
	}
	var k proto.PublicKey
	if err := json.Unmarshal(raw, &k); err != nil || k.Algorithm != proto.AlgorithmEd25519 {
		return nil, errors.New(`key must be "ssh-ed25519 …" or {"algorithm":"ed25519","public":…}`)
	}
	b, err := base64.StdEncoding.DecodeString(k.Public)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, errors.New("key is not base64 of a 32-byte ed25519 key")
	}
	return ed25519.PublicKey(b), nil
}

// identities maps client keys to who they are: hosts (from the CI-signed
// fleet) and operators (from the operators file).
type identities struct {
	mu        sync.RWMutex
	hosts     map[string]string // raw key -> hostname
	hostKeys  map[string]ed25519.PublicKey
	fleet     map[string]bool     // every host of that fleet, with a key or not
	raw       map[string]string   // by hostname, the key line each key was parsed from
	signedAt  time.Time           // of the fleet the host keys come from
	roster    *roster             // that fleet's hosts by name (roster.go)
	operators map[string]Operator // raw key -> operator
}

// fleetRoster returns the hosts of the fleet the host keys come from; nil
// while no fleet is known.
func (id *identities) fleetRoster() *roster {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.roster
}

// inFleet returns whether hostname is a host of the fleet the host keys
// come from, and false for every host while no fleet is known (ok false).
func (id *identities) inFleet() (in func(hostname string) bool, ok bool) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	if id.signedAt.IsZero() {
		return nil, false
	}
	fleet := id.fleet
	return func(hostname string) bool { return fleet[hostname] }, true
}

func newIdentities(ops []Operator) *identities {
	id := &identities{hosts: map[string]string{}, hostKeys: map[string]ed25519.PublicKey{}, operators: map[string]Operator{}}
	for _, op := range ops {
		k, _ := operatorKey(op.Key) // checked by LoadOperators
		id.operators[string(k)] = op
	}
	return id
}

// setHosts replaces the host keys with a fleet's, unless they come from a
// fleet signed later (channels move on their own; the newest fleet of any
// channel wins). Hosts without a pubkey, or with one that does not parse,
// cannot authenticate.
func (id *identities) setHosts(f *proto.FleetResolved, signedAt time.Time) {
	id.setKeys(parseHostKeys(f, id.current()), signedAt)
}

// hostKeys are a fleet's host identities, parsed (a large part of a
// second at 100,000 hosts when every key is new: the source parses them
// while it stores the release).
type hostKeys struct {
	hosts  map[string]string            // by key: the hostname
	keys   map[string]ed25519.PublicKey // by hostname
	fleet  map[string]bool              // every host of the fleet
	raw    map[string]string            // by hostname: the line of each key in keys
	roster *roster                      // the fleet's hosts by name, with their channels
}

// current returns the host keys in use.
func (id *identities) current() hostKeys {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return hostKeys{hosts: id.hosts, keys: id.hostKeys, fleet: id.fleet, raw: id.raw, roster: id.roster}
}

// parseHostKeys parses the pubkey of every host of f (parseKeys) and
// lists its hosts by name (newRoster), both starting from prev.
func parseHostKeys(f *proto.FleetResolved, prev hostKeys) hostKeys {
	k := parseKeys(f, prev)
	k.roster = newRoster(f, prev.roster)
	return k
}

// parseKeys parses the pubkey of every host of f; a host without
// one, or with one that does not parse, cannot authenticate. It starts
// from prev, the keys of a fleet before (parsing a line always gives the
// same key): prev itself when f has the same hosts with the same lines,
// prev's maps copied and patched when few hosts differ (a release that
// changes no host key costs a pass over the fleet, not 100,000 parses and
// map entries), a fresh parse otherwise. prev's maps are never written.
func parseKeys(f *proto.FleetResolved, prev hostKeys) hostKeys {
	var changed []string // hosts of f whose key or presence differs from prev
	found := 0           // hosts of f that prev has
	if prev.fleet != nil {
		for name, h := range f.Hosts {
			if prev.fleet[name] {
				found++
			}
			line, keyed := prev.raw[name]
			if !prev.fleet[name] || (h.Pubkey == nil) == keyed || h.Pubkey != nil && line != *h.Pubkey {
				changed = append(changed, name)
				if len(changed) > len(f.Hosts)/8 {
					break // a fresh parse is cheaper
				}
			}
		}
	}
	fresh := func() hostKeys {
		k := hostKeys{hosts: map[string]string{}, keys: map[string]ed25519.PublicKey{}, fleet: make(map[string]bool, len(f.Hosts)),
			raw: map[string]string{}}
		for name, h := range f.Hosts {
			k.fleet[name] = true
			k.add(name, h.Pubkey)
		}
		return k
	}
	switch {
	case prev.fleet == nil || len(changed) > len(f.Hosts)/8:
		return fresh()
	case len(changed) == 0 && found == len(prev.fleet):
		return prev
	}
	k := hostKeys{hosts: maps.Clone(prev.hosts), keys: maps.Clone(prev.keys), fleet: maps.Clone(prev.fleet), raw: maps.Clone(prev.raw)}
	if found < len(prev.fleet) {
		for name := range prev.fleet {
			if _, ok := f.Hosts[name]; !ok {
				if !k.drop(name) {
					return fresh()
				}
				delete(k.fleet, name)
			}
		}
	}
	for _, name := range changed {
		if !k.drop(name) || !k.add(name, f.Hosts[name].Pubkey) {
			return fresh()
		}
		k.fleet[name] = true
	}
	return k
}

// add parses a host's key line into k; a nil or unparsable one is no key.
// It reports false when another host has the same key (k is then left
// half-done: the caller parses afresh).
func (k hostKeys) add(name string, line *string) bool {
	if line == nil {
		return true
	}
	pub, err := trust.ParseSSHEd25519(*line)
	if err != nil {
		return true
	}
	other, taken := k.hosts[string(pub)]
	k.hosts[string(pub)], k.keys[name], k.raw[name] = name, pub, *line
	return !taken || other == name
}

// drop removes a host's key from k. It reports false when the key was
// another host's too (as add).
func (k hostKeys) drop(name string) bool {
	pub, ok := k.keys[name]
	if !ok {
		return true
	}
	delete(k.keys, name)
	delete(k.raw, name)
	if k.hosts[string(pub)] != name {
		return false
	}
	delete(k.hosts, string(pub))
	return true
}

// setKeys is setHosts with the keys parsed.
func (id *identities) setKeys(k hostKeys, signedAt time.Time) {
	id.mu.Lock()
	defer id.mu.Unlock()
	if signedAt.Before(id.signedAt) {
		return
	}
	id.hosts, id.hostKeys, id.fleet, id.raw, id.roster, id.signedAt = k.hosts, k.keys, k.fleet, k.raw, k.roster, signedAt
}

// client is who sent a request.
type client struct {
	host     string            // a host, by its key
	operator *Operator         // an operator, by its key
	key      ed25519.PublicKey // the operator's key, which signs its intents
	dev      bool              // --insecure-dev: nobody is authenticated
}

func (c client) actor() string {
	switch {
	case c.operator != nil:
		return c.operator.Name
	case c.dev:
		return "insecure-dev"
	}
	return ""
}

// identify returns the client of a request from its TLS client certificate.
func (id *identities) identify(r *http.Request, dev bool) (client, *codes.Error) {
	if dev {
		return client{dev: true}, nil
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return client{}, codes.Errorf(codes.Unauthenticated, "a client certificate is required")
	}
	pub, ok := r.TLS.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
	if !ok {
		return client{}, codes.Errorf(codes.UnknownClient, "the client certificate's key is not ed25519")
	}
	id.mu.RLock()
	defer id.mu.RUnlock()
	if host, ok := id.hosts[string(pub)]; ok {
		return client{host: host}, nil
	}
	if op, ok := id.operators[string(pub)]; ok {
		return client{operator: &op, key: pub}, nil
	}
	return client{}, codes.Errorf(codes.UnknownClient, "the client certificate's key belongs to no host of the signed fleet and no operator")
}

// asHost checks that a client may act as the named host: its key must be
// that host's CI-signed key.
func (id *identities) asHost(c client, hostname string) *codes.Error {
	if hostname == "" {
		return codes.Errorf(codes.BadRequest, "hostname is required")
	}
	if c.dev {
		return nil
	}
	if c.host == "" {
		return codes.Errorf(codes.Forbidden, "agent endpoints are for hosts")
	}
	if c.host != hostname {
		id.mu.RLock()
		_, known := id.hostKeys[hostname]
		id.mu.RUnlock()
		if known {
			return codes.Errorf(codes.HostMismatch, "the client certificate is %s's key, not %s's", c.host, hostname)
		}
		return codes.Errorf(codes.UnknownHost, "%q is not a host of the signed fleet", hostname)
	}
	return nil
}

// operatorKeyHash is the hex SHA-256 of a named operator's key ("" for no
// such operator): what a dashboard session is bound to.
func (id *identities) operatorKeyHash(name string) string {
	id.mu.RLock()
	defer id.mu.RUnlock()
	for k, op := range id.operators {
		if op.Name == name {
			return dashboard.HashHex(k)
		}
	}
	return ""
}

// operatorByName returns the named operator if its key still hashes to
// keyHash.
func (id *identities) operatorByName(name, keyHash string) (Operator, bool) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	for k, op := range id.operators {
		if op.Name == name {
			return op, keyHash != "" && dashboard.HashHex(k) == keyHash
		}
	}
	return Operator{}, false
}

// hostKey returns a host's key, for report signatures.
func (id *identities) hostKey(hostname string) (ed25519.PublicKey, bool) {
	id.mu.RLock()
	defer id.mu.RUnlock()
	k, ok := id.hostKeys[hostname]
	return k, ok
}

// may checks an operator's role: viewers read, operators and approvers
// also act (which intents each may file, mayFile says). Hosts may read a
// rollout's manifest only.
func may(c client, act bool) *codes.Error {
	switch {
	case c.dev:
		return nil
	case c.operator == nil:
		return codes.Errorf(codes.Forbidden, "operator endpoints need an operator certificate")
	case act && !roleActs(c.operator.Role):
		return codes.Errorf(codes.Forbidden, "operator %s has role %s; acting on rollouts needs role operator or approver", c.operator.Name, c.operator.Role)
	}
	return nil
}
