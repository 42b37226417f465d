package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// head is what deciding which rollouts are live needs of a rollout.
type head struct {
	id, channel  string
	state        reconciler.RolloutState
	opened       int64
	updated      int64
	manifestHash string
	soaks        []time.Duration         // each wave's soak (wave_soaks)
	reboots      []reconciler.RebootSpec // each wave's reboot step (reboot)
}

// rebootOf is the reboot step of a wave (reconciler.Rollout.RebootOf).
func (h head) rebootOf(wave int) reconciler.RebootSpec {
	if wave < 0 || wave >= len(h.reboots) {
		return reconciler.RebootSpec{}
	}
	return h.reboots[wave]
}

// waveSoak is the soak of a wave (reconciler.Rollout.WaveSoak).
func (h head) waveSoak(wave int) time.Duration {
	if wave < 0 || wave >= len(h.soaks) {
		return 0
	}
	return h.soaks[wave]
}

// newer orders rollouts as the reconciler does (reconciler.Newer).
func (h head) newer(o head) bool {
	return reconciler.Newer(fromMicros(h.opened), h.id, fromMicros(o.opened), o.id)
}

// liveness is what decides which rollouts a tick loads.
type liveness struct {
	heads    []head
	latest   map[string]string // channel -> id of its latest rollout
	inFlight map[string]bool   // finished rollouts, not their channel's latest, with a host in flight
	intended map[string]bool   // rollouts named by an unconsumed intent
}

func loadLiveness(ctx context.Context, c conn) (*liveness, error) {
	l := &liveness{latest: map[string]string{}}
	var err error
	l.heads, err = collect(ctx, c, l.heads, func(rs row) (head, error) {
		var h head
		var soaks, reboot string
		if err := rs.Scan(&h.id, &h.channel, (*string)(&h.state), &h.opened, &h.updated, &h.manifestHash, &soaks, &reboot); err != nil {
			return h, err
		}
		if h.soaks, err = parseWaveSoaks(soaks); err != nil {
			return h, err
		}
		h.reboots, err = parseReboot(reboot, len(h.soaks))
		return h, err
	}, "SELECT id, channel, state, opened_at, updated_at, manifest_hash, wave_soaks, reboot FROM rollouts")
	if err != nil {
		return nil, fmt.Errorf("store: load rollouts: %w", err)
	}
	byID := make(map[string]head, len(l.heads))
	for _, h := range l.heads {
		byID[h.id] = h
		if cur, ok := l.latest[h.channel]; !ok || h.newer(byID[cur]) {
			l.latest[h.channel] = h.id
		}
	}
	slices.SortFunc(l.heads, func(a, b head) int {
		return cmp.Or(cmp.Compare(a.opened, b.opened), strings.Compare(a.id, b.id))
	})
	// A host in flight matters only to the rollouts that nothing else
	// keeps live (live, prunable): the finished ones that are not their
	// channel's latest. They are asked by key (the partial index
	// rollout_hosts_in_flight), so a request does not read the in-flight
	// rows of the rollouts under way: 100,000 of them while a fleet
	// switches, for every confirm.
	var finished []any
	for _, h := range l.heads {
		if h.state.Terminal() && l.latest[h.channel] != h.id {
			finished = append(finished, h.id)
		}
	}
	l.inFlight = map[string]bool{}
	err = inChunks(finished, idChunk, func(ids []any) error {
		set, err := stringSet(ctx, c, "SELECT DISTINCT rollout_id FROM rollout_hosts WHERE state IN ("+inFlightStates+") AND rollout_id IN ("+placeholders(len(ids))+")", ids...)
		maps.Copy(l.inFlight, set)
		return err
	})
	if err != nil {
		return nil, err
	}
	if l.intended, err = stringSet(ctx, c, "SELECT DISTINCT rollout_id FROM intents WHERE consumed = 0"); err != nil {
		return nil, err
	}
	return l, nil
}

// stringSet returns the strings a one-column query returns, as a set.
func stringSet(ctx context.Context, c conn, query string, args ...any) (map[string]bool, error) {
	l, err := collect(ctx, c, nil, scanString, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: load: %w", err)
	}
	set := make(map[string]bool, len(l))
	for _, s := range l {
		set[s] = true
	}
	return set, nil
}

// live reports whether a tick must load a rollout (reconciler.Live).
// inFlight holds only the finished rollouts that are not their channel's
// latest: the others are live whatever their hosts do.
func (l *liveness) live(h head) bool {
	return reconciler.Live(h.state, reconciler.LiveFacts{Latest: l.latest[h.channel] == h.id,
		HostInFlight: l.inFlight[h.id], Intended: l.intended[h.id]})
}

// onlyIntended reports whether only an unconsumed intent keeps a rollout
// live (kept.Compare).
func (l *liveness) onlyIntended(id string) bool {
	if !l.intended[id] {
		return false
	}
	without := *l
	without.intended = nil
	i := slices.IndexFunc(l.heads, func(h head) bool { return h.id == id })
	return i >= 0 && !without.live(l.heads[i])
}

// keptHeads are the heads as the kept input holds them.
func (l *liveness) keptHeads() []kept.Head {
	out := make([]kept.Head, len(l.heads))
	for i, h := range l.heads {
		out[i] = kept.Head{ID: h.id, Channel: h.channel, State: h.state, Opened: fromMicros(h.opened)}
	}
	return out
}

// liveHeads returns the live rollouts, oldest first.
func (l *liveness) liveHeads() []head {
	return filter(l.heads, l.live)
}

// prunable reports whether Prune may delete a rollout: terminal, last
// updated before the cut-off, not the latest of its channel, and not
// live for another reason (a host in flight, an unconsumed intent).
func (l *liveness) prunable(h head, before int64) bool {
	return h.state.Terminal() && h.updated < before && l.latest[h.channel] != h.id &&
		!l.inFlight[h.id] && !l.intended[h.id]
}

// inChunks calls fn with consecutive slices of at most n items.
func inChunks[T any](items []T, n int, fn func([]T) error) error {
	for start := 0; start < len(items); start += n {
		if err := fn(items[start:min(start+n, len(items))]); err != nil {
			return err
		}
	}
	return nil
}

// idChunk bounds IN lists (both backends allow far more parameters).
const idChunk = 500

func anys[T any](l []T) []any {
	out := make([]any, len(l))
	for i, x := range l {
		out[i] = x
	}
	return out
}

// planDecoding is how loadRollouts decodes a rollout's frozen plan.
type planDecoding int

const (
	// planWhole decodes all of it.
	planWhole planDecoding = iota
	// planCached takes it from the cache when its text is the one cached
	// (the tick; the values are shared and must not be modified).
	planCached
	// planForView decodes only what a host's view needs (frozenView).
	planForView
)

// loadRollouts returns the rollouts with the given ids, oldest first, with
// their hosts (sorted by hostname) when hosts is set, their frozen plans
// decoded as plan says.
func (s *db) loadRollouts(ctx context.Context, c conn, ids []string, hosts bool, plan planDecoding) ([]reconciler.Rollout, error) {
	var out []reconciler.Rollout
	err := inChunks(ids, idChunk, func(chunk []string) error {
		var err error
		out, err = collect(ctx, c, out, func(rs row) (reconciler.Rollout, error) {
			r, fz, err := scanRollout(rs)
			if err != nil {
				return r, err
			}
			var f frozen
			switch plan {
			case planForView:
				var v frozenView
				err = unmarshal(fz, &v)
				v.into(&r)
				return r, err
			case planCached:
				f, err = s.cache.frozenOf(r.ID, fz)
			default:
				err = unmarshal(fz, &f)
			}
			if err != nil {
				return r, err
			}
			f.into(&r)
			return r, nil
		}, "SELECT "+rolloutCols+" FROM rollouts WHERE id IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load rollouts: %w", err)
	}
	slices.SortFunc(out, func(a, b reconciler.Rollout) int {
		return cmp.Or(a.OpenedAt.Compare(b.OpenedAt), strings.Compare(a.ID, b.ID))
	})
	if !hosts || len(out) == 0 {
		return out, nil
	}
	index := make(map[string]int, len(out))
	for i, r := range out {
		index[r.ID] = i
	}
	sc := newHostScanner()
	err = inChunks(ids, idChunk, func(chunk []string) error {
		return eachRow(ctx, c, func(rs row) error {
			rid, h, err := sc.scan(rs)
			if err != nil {
				return err
			}
			if i, ok := index[rid]; ok {
				out[i].Hosts = append(out[i].Hosts, h)
			}
			return nil
		}, "SELECT "+hostCols+" FROM rollout_hosts WHERE rollout_id IN ("+placeholders(len(chunk))+")", anys(chunk)...)
	})
	if err != nil {
		return nil, fmt.Errorf("store: load rollout hosts: %w", err)
	}
	for i := range out {
		sortHosts(out[i].Hosts)
	}
	return out, nil
}

func sortHosts(hs []reconciler.RolloutHost) {
	byName := func(a, b reconciler.RolloutHost) int { return strings.Compare(a.Hostname, b.Hostname) }
	if !slices.IsSortedFunc(hs, byName) {
		slices.SortFunc(hs, byName)
	}
}

// loadInput reads the reconciler's Input inside a tick's transaction, in
// full (a cold load), and returns the rollouts' liveness.
func (s *db) loadInput(ctx context.Context, tx *txn, in *reconciler.Input) (*liveness, error) {
	if err := s.loadChannels(ctx, tx, in); err != nil {
		return nil, err
	}
	l, err := loadLiveness(ctx, tx)
	if err != nil {
		return nil, err
	}
	heads := l.liveHeads()
	ids := make([]string, len(heads))
	keep := make(map[string]bool, len(heads))
	for i, h := range heads {
		ids[i], keep[h.id] = h.id, true
	}
	if in.Rollouts, err = s.loadRollouts(ctx, tx, ids, true, planCached); err != nil {
		return nil, err
	}
	if in.Rollouts == nil {
		in.Rollouts = []reconciler.Rollout{}
	}
	s.cache.keepFrozen(keep)
	if in.Hosts, err = s.loadObserved(ctx, tx); err != nil {
		return nil, err
	}
	if in.Measurements, err = loadMeasured(ctx, tx, in.Rollouts); err != nil {
		return nil, err
	}
	if in.Intents, err = loadIntents(ctx, tx); err != nil {
		return nil, err
	}
	if in.Visibility, err = loadVisibility(ctx, tx); err != nil {
		return nil, err
	}
	in.Deferrals, err = collect(ctx, tx, []reconciler.Deferral{}, func(rs row) (reconciler.Deferral, error) {
		var d reconciler.Deferral
		err := rs.Scan(&d.Channel, &d.Ref, &d.BlockedBy)
		return d, err
	}, "SELECT channel, ref, blocked_by FROM deferrals ORDER BY seq")
	if err != nil {
		return nil, fmt.Errorf("store: load deferrals: %w", err)
	}
	return l, nil
}

// loadChannels reads every channel's release, decoding the artifacts only
// when their hash is not in the cache.
func (s *db) loadChannels(ctx context.Context, tx *txn, in *reconciler.Input) error {
	in.Channels = []reconciler.Channel{}
	type hashes struct{ fleet, manifest, fleetBlob, manifestBlob string }
	var hs []hashes
	err := eachRow(ctx, tx, func(rs row) error {
		var c reconciler.Channel
		var h hashes
		if err := rs.Scan(&c.Name, &c.Ref, &h.fleet, &h.manifest, &c.LastRolledRef, &h.fleetBlob, &h.manifestBlob); err != nil {
			return err
		}
		c.ManifestHash = h.manifest
		in.Channels = append(in.Channels, c)
		hs = append(hs, h)
		return nil
	}, "SELECT channel, ref, fleet_hash, manifest_hash, last_rolled_ref, fleet_blob, manifest_blob FROM channels")
	if err != nil {
		return fmt.Errorf("store: load channels: %w", err)
	}
	fleets := map[string]*proto.FleetResolved{}
	manifests := map[string]*proto.RolloutManifest{}
	s.cache.mu.Lock()
	for _, h := range hs {
		if f, ok := s.cache.fleets[h.fleet]; ok {
			fleets[h.fleet] = f
		}
		if m, ok := s.cache.manifests[h.manifest]; ok {
			manifests[h.manifest] = m
		}
	}
	s.cache.mu.Unlock()
	for i := range in.Channels {
		c := &in.Channels[i]
		if _, ok := fleets[hs[i].fleet]; !ok {
			body, err := readBlob(ctx, tx, hs[i].fleetBlob)
			if err != nil {
				return fmt.Errorf("store: load channel %s: %w", c.Name, err)
			}
			f, err := proto.DecodeFleetResolved(body)
			if err != nil {
				return fmt.Errorf("store: channel %s: stored fleet.resolved: %w", c.Name, err)
			}
			fleets[hs[i].fleet] = f
		}
		if _, ok := manifests[hs[i].manifest]; !ok {
			body, err := readBlob(ctx, tx, hs[i].manifestBlob)
			if err != nil {
				return fmt.Errorf("store: load channel %s: %w", c.Name, err)
			}
			m, err := proto.DecodeRolloutManifest(body)
			if err != nil {
				return fmt.Errorf("store: channel %s: stored manifest: %w", c.Name, err)
			}
			manifests[hs[i].manifest] = m
		}
		c.Fleet, c.Manifest = fleets[hs[i].fleet], manifests[hs[i].manifest]
	}
	// The cache keeps what the channels hold now, nothing older.
	s.cache.mu.Lock()
	s.cache.fleets, s.cache.manifests = fleets, manifests
	s.cache.mu.Unlock()
	slices.SortFunc(in.Channels, func(a, b reconciler.Channel) int { return strings.Compare(a.Name, b.Name) })
	return nil
}

// loadObserved reads every observed host: its last-seen time and its last
// status. Statuses are decoded only when their digest changed since the
// last tick.
func (s *db) loadObserved(ctx context.Context, tx *txn) (map[string]reconciler.ObservedHost, error) {
	seen := map[string]reconciler.ObservedHost{}
	err := eachRow(ctx, tx, func(rs row) error {
		var name string
		var at, saidAt int64
		if err := rs.Scan(&name, &at, &saidAt); err != nil {
			return err
		}
		var o reconciler.ObservedHost
		seenTimes(&o, at, saidAt)
		seen[name] = o
		return nil
	}, "SELECT hostname, last_seen, said_at FROM host_seen")
	if err != nil {
		return nil, fmt.Errorf("store: load hosts: %w", err)
	}

	digests := map[string]string{}
	err = eachRow(ctx, tx, func(rs row) error {
		var name, digest string
		if err := rs.Scan(&name, &digest); err != nil {
			return err
		}
		digests[name] = digest
		return nil
	}, "SELECT hostname, digest FROM host_status")
	if err != nil {
		return nil, fmt.Errorf("store: load statuses: %w", err)
	}
	statuses := make(map[string]cachedStatus, len(digests))
	var missing []string
	s.cache.mu.Lock()
	for name, digest := range digests {
		if e, ok := s.cache.statuses[name]; ok && e.digest == digest {
			statuses[name] = e
		} else {
			missing = append(missing, name)
		}
	}
	s.cache.mu.Unlock()
	read := func(query string, args ...any) error {
		return eachRow(ctx, tx, func(rs row) error {
			var name, digest, body string
			if err := rs.Scan(&name, &digest, &body); err != nil {
				return err
			}
			st, err := decodeStatus(body)
			if err != nil {
				return fmt.Errorf("host %s: %w", name, err)
			}
			statuses[name] = cachedStatus{digest: digest, st: st}
			return nil
		}, query, args...)
	}
	if len(missing) > len(digests)/4 {
		err = read("SELECT hostname, digest, status FROM host_status")
	} else {
		slices.Sort(missing)
		err = inChunks(missing, idChunk, func(chunk []string) error {
			return read("SELECT hostname, digest, status FROM host_status WHERE hostname IN ("+placeholders(len(chunk))+")", anys(chunk)...)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("store: load statuses: %w", err)
	}
	s.cache.mu.Lock()
	s.cache.statuses = statuses
	s.cache.mu.Unlock()

	out := make(map[string]reconciler.ObservedHost, max(len(seen), len(statuses)))
	for name, e := range statuses {
		out[name] = observed(e.st, seen[name])
	}
	for name, o := range seen {
		if _, ok := out[name]; !ok {
			out[name] = o
		}
	}
	return out, nil
}

// loadVisibility reads the channels in partial visibility, by name.
func loadVisibility(ctx context.Context, c conn) ([]reconciler.Visibility, error) {
	out, err := collect(ctx, c, []reconciler.Visibility{}, func(rs row) (reconciler.Visibility, error) {
		var v reconciler.Visibility
		var since, ended int64
		if err := rs.Scan(&v.Channel, &since, &ended, &v.Silent, &v.Total); err != nil {
			return v, err
		}
		v.Since = fromMicros(since)
		if ended != 0 {
			v.Ended = fromMicros(ended)
		}
		return v, nil
	}, "SELECT channel, since, ended, silent, total FROM visibility ORDER BY channel")
	if err != nil {
		return nil, fmt.Errorf("store: load visibility: %w", err)
	}
	slices.SortFunc(out, func(a, b reconciler.Visibility) int { return strings.Compare(a.Channel, b.Channel) })
	return out, nil
}

// Sight returns what the control plane could see at its last tick.
func (s *db) Sight(ctx context.Context) (Sight, error) {
	var out Sight
	err := s.read(ctx, func(tx *txn) error {
		var since, alive int64
		switch err := tx.queryRow(ctx, "SELECT since, alive_at FROM watch WHERE id = 1").Scan(&since, &alive); {
		case err == nil:
			out.WatchingSince, out.LastTick = fromMicros(since), fromMicros(alive)
		case !errors.Is(err, errNoRows):
			return err
		}
		var err error
		out.Visibility, err = loadVisibility(ctx, tx)
		return err
	})
	if err != nil {
		return Sight{}, fmt.Errorf("store: sight: %w", err)
	}
	return out, nil
}

// loadIntents reads the unconsumed intents, oldest first.
func loadIntents(ctx context.Context, c conn) ([]reconciler.Intent, error) {
	out, err := collect(ctx, c, []reconciler.Intent{}, func(rs row) (reconciler.Intent, error) {
		var it reconciler.Intent
		var at int64
		var wave int
		err := rs.Scan(&it.ID, &it.RolloutID, &it.Kind, &it.Actor, &at, &it.Comment, &wave)
		it.At, it.Wave = fromMicros(at), waveOf(wave)
		return it, err
	}, "SELECT id, rollout_id, kind, actor, at, comment, wave FROM intents WHERE consumed = 0")
	if err != nil {
		return nil, fmt.Errorf("store: load intents: %w", err)
	}
	slices.SortFunc(out, func(a, b reconciler.Intent) int {
		return cmp.Or(a.At.Compare(b.At), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}
