// Package store is the control plane's persistence: two backends
// (PostgreSQL through pgx for production and HA, embedded SQLite for zero
// set-up) behind one interface split by noun (Store: ticks, releases,
// hosts, intents, rollouts, journal, leases, dashboard sessions,
// notification cursors), one schema with embedded numbered migrations, and
// one conformance suite (package storetest) that both pass.
//
// Contract:
//
//  1. Open migrates the schema (each migration in its own transaction,
//     recorded in schema_migrations) before returning.
//  2. A tick (TickStore.Tick) holds the tick lock, checks the caller
//     still holds the tick lease (fencing), loads the reconciler's Input,
//     lets the caller decide, applies the Output the way reconciler.Apply
//     describes, and commits, or writes nothing. The Input is the live
//     rollouts (reconciler.Live), not every rollout.
//  3. The store keeps no state of its own beyond caches of what a hash
//     or an unchanged row names. The leader keeps the Input between the
//     ticks of one lease (package kept) and hands it to each tick
//     (TickParams.Kept): a tick reads only what changed since the
//     previous one (catchup.go), and the kept Input must equal a cold load
//     (VerifyKept compares them; a difference drops it and the next tick
//     loads in full). Any failure, a new lease, or TickParams.Full makes
//     the next tick load in full.
//  4. A tick that opens a rollout commits the rollout and the hosts it
//     moved, and writes the hosts still Pending in a second transaction
//     after it reported (owed.go): until then readers other than the
//     leader's ticks may see the rollout with only its moved hosts, and
//     rows that second transaction could not write are owed in the
//     Keeper; a leader that stopped in between is made good by the next
//     full load.
//  5. Observations are kept apart: a host's status is written only when
//     it changes (RecordStatus, RecordCheckin, RecordStatuses), its
//     last-seen time in batches (TouchHosts), with when the stored status
//     was last said: the last check-in that carried it
//     (ObservedHost.StatusAt), which a write the store lost leaves behind
//     the last-seen time. Canary analysis measurements are observations
//     too, written once per run and seq (RecordMeasurement).
//  6. The allowed state names of hosts and rollouts are CHECK constraints
//     in the schema, equal to reconciler.HostStates and RolloutStates.
//  7. All times are the caller's (no clock is read here), stored as UTC
//     microseconds.
//  8. The operator API's reads are bounded (pages.go): HostPage,
//     RolloutPage and RolloutView read a page by key (hostname after a
//     cursor; opening time and id before one) and what that page needs,
//     never every host or every rollout's plan; RolloutHeader and
//     LatestRollouts read no plan and no host. HostPage lists hostnames
//     in byte order, also on a PostgreSQL database whose collation sorts
//     otherwise, so that the caller's fleet (HostQuery.Fleet, in memory)
//     merges into them.
//  9. A rollout's forecast (PutForecasts, rfcs/0014) is written beside
//     the ticks, without the tick lock, and no tick reads it: the latest
//     replaces the one before, the first is kept, and it goes with its
//     rollout. A host's activation time (PutActivationTimes), the
//     forecasts' model of it, is written beside the ticks with no tick
//     lock too: the latest replaces the one before, and it goes when
//     PruneHosts forgets the host.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/nixfleet/nixfleet/controlplane/kept"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// Errors. Functions document which they return; wrap-check with errors.Is.
var (
	// ErrNotFound: the rollout, host, lease, release, forecast,
	// dashboard sign-in or session does not exist (or no longer counts).
	ErrNotFound = errors.New("store: not found")
	// ErrNotLeader: the caller's lease is not (or no longer) the current
	// holder of the tick lease; nothing was written.
	ErrNotLeader = errors.New("store: not the leader")
	// ErrLeaseHeld: another holder's lease has not expired.
	ErrLeaseHeld = errors.New("store: lease held by another replica")
	// ErrStaleRelease: a release signed no later than the channel's
	// current one (a replay or a reordering); nothing was written but
	// the release log's row of a push back to the current release.
	ErrStaleRelease = errors.New("store: release is not newer than the channel's current one")
	// ErrReusedRef: a release whose ref (meta.ciCommit) names a rollout
	// its channel opened before, and not the last one: CI re-signed an
	// old ciCommit, and its rollout id would open twice; nothing was
	// written.
	ErrReusedRef = errors.New("store: release names a rollout its channel opened before")
	// ErrDuplicate: an intent id or a sign-in token that already exists.
	ErrDuplicate = errors.New("store: duplicate")
	// ErrCursorMoved: a notification cursor was not where the caller
	// said it was (another replica moved it); nothing was written.
	ErrCursorMoved = errors.New("store: notification cursor moved")
	// ErrTooLarge: a value over its cap (a forecast's Body over
	// MaxForecastBody); nothing was written.
	ErrTooLarge = errors.New("store: too large")
)

// TickLease is the name of the lease that elects the replica that ticks.
const TickLease = "tick"

// Release is a verified release of one channel, as read from git: the
// artifacts exactly as signed, and what verification established.
type Release struct {
	Channel string
	// Ref is the release's meta.ciCommit: the channel ref the reconciler
	// rolls out.
	Ref string
	// SourceCommit is the git commit the channel ref pointed to.
	SourceCommit string
	SignedAt     time.Time
	// FleetBody and FleetSig are fleet.resolved.json and its .sig as read.
	FleetBody, FleetSig []byte
	// FleetHash is the SHA-256 (hex) of the canonical fleet bytes.
	FleetHash string
	// ManifestBody and ManifestSig are the channel's rollout manifest.
	ManifestBody, ManifestSig []byte
	// ManifestHash is the manifest's content hash.
	ManifestHash string
	VerifiedAt   time.Time
	// Fleet and Manifest, when set, are FleetBody and ManifestBody as the
	// caller decoded them while verifying them, strictly as proto decodes
	// them. The store keeps them by hash once the release is stored, so
	// the tick that opens it does not decode them again (a 100,000-host
	// fleet costs a large part of a second). Nobody may modify them
	// afterwards: ticks share them. Nil: the tick decodes the bodies.
	Fleet    *proto.FleetResolved
	Manifest *proto.RolloutManifest
}

// Seen is a check-in to record: when it came, and the digest of the
// status it carried (StatusDigest; "" when unknown, as for a probe
// report, which carries part of a status).
type Seen struct {
	At   time.Time
	Said string
}

// SeenAt is a TouchHosts batch of check-ins at the given times that
// carried no status digest: their times are recorded, and nothing as said.
func SeenAt(times map[string]time.Time) map[string]Seen {
	out := make(map[string]Seen, len(times))
	for h, at := range times {
		out[h] = Seen{At: at}
	}
	return out
}

// StatusWrite is one write of RecordStatuses.
type StatusWrite struct {
	Hostname string
	// Status, when set, is the status the host checked in with: written
	// when it differs from the stored one, the stored activation kept
	// (its own ignored), as RecordCheckin does.
	Status *HostStatus
	// Activation, when set, replaces the stored activation, the rest of
	// the status left alone, as RecordActivation does.
	Activation *reconciler.Activation
	// Seen, unless zero, is recorded as the host's last-seen time, as a
	// change a tick must see, when the write changed the status or
	// Urgent is set; and as when the stored status was last said, when
	// the status the check-in carried is the stored one: Status, or
	// without it the one Said names (its StatusDigest).
	Seen   time.Time
	Said   string
	Urgent bool
}

// StatusResult is what RecordStatuses did with one write: whether the
// status changed, and whether anything was written.
type StatusResult struct {
	Changed, Written bool
}

// Manifest is the manifest a rollout serves to agents, bytes as signed.
type Manifest struct {
	RolloutID string
	Body, Sig []byte
	Hash      string
}

// HostStatus is what an agent reports on check-in, apart from the time.
type HostStatus struct {
	Current     string                        `json:"current"`
	Booted      string                        `json:"booted"`
	BootID      string                        `json:"bootId,omitempty"`
	Probes      reconciler.ProbeSummary       `json:"probes"`
	FailedUnits []string                      `json:"failedUnits"`
	Compliance  []reconciler.ComplianceResult `json:"compliance"`
	Deferred    bool                          `json:"deferred"`
	Activation  *reconciler.Activation        `json:"activation,omitempty"`
	Quarantine  []reconciler.Quarantine       `json:"quarantine"`
	// Prefetched is the closure the agent holds realised for an
	// activation to come (rfcs/0008 §Prefetch); omitted when empty, so
	// that the digest of a status without it is what it was before.
	Prefetched string `json:"prefetched,omitempty"`
}

// HostRecord is a host as the API lists it: its observation and its place
// in the rollout that drives it.
type HostRecord struct {
	Hostname string
	// Seen is false for a host that never checked in.
	Seen     bool
	Observed reconciler.ObservedHost
	// Assignment is nil for a host in no rollout.
	Assignment *reconciler.Assignment
	// Fleet is the host in the signed fleet HostQuery.Fleet holds; nil
	// when it is not there (or no fleet was given).
	Fleet *FleetHost
}

// Lease is a held lease. Epoch increases each time the lease changes
// holder; Tick compares it for fencing.
type Lease struct {
	Name    string
	Holder  string
	Epoch   int64
	Expires time.Time
}

// Sight is what the control plane could see at its last committed tick
// (rfcs/0003 rule 6).
type Sight struct {
	// WatchingSince is when its current unbroken watch over its hosts
	// began; zero before the first tick.
	WatchingSince time.Time
	// LastTick is its last committed tick.
	LastTick time.Time
	// Visibility lists the channels in partial visibility, or recovering
	// from it (Ended set), by name.
	Visibility []reconciler.Visibility
}

// Watermark tells replicas that something changed without reading it.
type Watermark struct {
	// Events is the newest event id written, pruned or not (0 when none).
	Events int64
	// Changes grows with every write a tick must see.
	Changes int64
	// Seen grows with every batch of last-seen times written.
	Seen int64
	// PrunedEvents is the newest event id Prune has deleted (0 when none):
	// a reader whose place in the journal is below it missed events.
	PrunedEvents int64
}

// WebLogin is a one-time dashboard sign-in an operator's CLI asked for
// (rfcs/0011): whoever presents its token before Expires gets a session,
// once.
type WebLogin struct {
	// TokenHash is the hex SHA-256 of the one-time token; the token itself
	// is never stored.
	TokenHash string
	// Operator is the operator's name.
	Operator string
	// KeyHash is the hex SHA-256 of the operator's public key when the
	// login was made.
	KeyHash string
	// Expires is when the token stops being redeemable.
	Expires time.Time
	// SessionTTL is how long the session the login becomes lasts.
	SessionTTL time.Duration
}

// WebSession is a signed-in dashboard session, made by redeeming a
// WebLogin.
type WebSession struct {
	// Hash is the hex SHA-256 of the session secret the browser holds in
	// its cookie.
	Hash string
	// Operator and KeyHash are the login's.
	Operator string
	KeyHash  string
	// Created is when the login was redeemed.
	Created time.Time
	// Expires is when the session ends unless signed out before.
	Expires time.Time
}

// IntentRecord is an operator intent and, once consumed, its result.
type IntentRecord struct {
	reconciler.Intent
	// Result is nil until a tick consumed the intent.
	Result *reconciler.IntentResult
	// Signed is the signed intent the operator sent, verbatim; nil for
	// one filed unsigned.
	Signed *proto.SignedIntent
}

// Store is the control plane's state: one interface per noun, and the
// backend's name. Implementations are safe for concurrent use.
type Store interface {
	// Backend names the implementation: "postgres" or "sqlite".
	Backend() string
	// Close releases the connections.
	Close()

	TickStore
	ReleaseStore
	HostStore
	IntentStore
	RolloutStore
	JournalStore
	LeaseStore
	WebStore
	NotifyStore
}

// TickStore is the tick and what replicas learn of it: the one write
// transaction of a tick, the comparison of the kept input with a cold load,
// the watch, and the marks that tell replicas something changed.
type TickStore interface {
	// Tick runs one reconcile tick in one write transaction: it takes the
	// tick lock, reads p.Clock (the tick's now), checks that p.Lease is the
	// current, unexpired holder of TickLease at now (else ErrNotLeader),
	// keeps the watch (a gap of more than p.MaxGap since the previous tick
	// starts a new one, with a watch_started event), loads the reconciler
	// Input (now, tunables, watchingSince, channels from the latest
	// releases, rollouts with hosts, observed hosts, unconsumed intents,
	// deferrals, visibility), calls decide, and applies its Output like
	// reconciler.Apply: new rollouts with their hosts and a copy of their
	// channel's manifest (Manifest), changed rollouts and hosts, channels'
	// last rolled refs, deferrals, visibility, the fates of the refs it
	// decided about (release log), intent results, and the events
	// (stamped now), and extends p.Lease by p.LeaseTTL. An error from
	// decide or from applying leaves the store unchanged. The Output
	// returned carries the watch_started event first when there was one.
	Tick(ctx context.Context, p TickParams, decide func(reconciler.Input) (reconciler.Output, error)) (reconciler.Output, error)
	// VerifyKept compares the input k keeps between ticks with a cold
	// load from one snapshot, holding up k's ticks only while it copies
	// the kept input, and drops the kept input when they differ (the next
	// tick loads in full).
	VerifyKept(ctx context.Context, k *kept.Keeper) (VerifyReport, error)
	// Sight returns what the control plane could see at its last tick: its
	// watch and the channels in partial visibility.
	Sight(ctx context.Context) (Sight, error)
	// Watermark returns the store's high-water marks: the newest event id,
	// and a counter that grows with every write a tick must see (a status
	// that changed, an activation, an intent, a release).
	Watermark(ctx context.Context) (Watermark, error)
}

// ReleaseStore is verified releases, the release log and the manifests
// rollouts serve.
type ReleaseStore interface {
	// PutRelease records a channel's verified release, replacing the
	// current one, and logs it in the release log; the ref it replaced,
	// if it had not opened a rollout, is superseded there, with a
	// ref_superseded event. A release whose SignedAt is not after the
	// current one's returns ErrStaleRelease and writes nothing but, for
	// the current release met at another commit than the channel's latest
	// push, a row for that push. A release whose ref names a rollout the
	// channel opened before, and not the one it rolled last, returns
	// ErrReusedRef and writes nothing.
	PutRelease(ctx context.Context, r Release) error
	// PutReleases records several channels' releases in one transaction,
	// so that a tick sees all of them or none: errs[i] is the error
	// PutRelease would return for rs[i] (ErrStaleRelease, ErrReusedRef,
	// an incomplete release), and the others are stored; err is a store
	// failure, after which nothing is stored.
	PutReleases(ctx context.Context, rs []Release) (errs []error, err error)
	// StageReleaseBodies writes the bodies of a release that is being
	// verified, so that the PutReleases that follows only names them
	// (blobs.go); it reports how many it wrote. Nothing depends on it: a
	// body not staged is written by PutReleases, and a staged one no
	// release names is deleted by the next release stored. It writes
	// nothing while maxLooseBlobs such bodies wait.
	StageReleaseBodies(ctx context.Context, now time.Time, bodies ...[]byte) (int, error)
	// SweepBlobParts deletes the parts of release blobs that are gone
	// (blobs.go): storing a release deletes the blobs no channel names,
	// and this their parts, off the release's path (deleting a large
	// fleet's parts takes PostgreSQL 100–200 ms). It reports how many
	// blobs' parts it deleted.
	SweepBlobParts(ctx context.Context) (int, error)
	// Releases returns the current release of every channel, by channel
	// name.
	Releases(ctx context.Context) ([]Release, error)
	// RefuseRelease records a push the source refused in the release log:
	// a new row when the ref moved, also back to a commit of an earlier
	// push; the same push read again keeps its row, and its fate unless
	// refused.
	RefuseRelease(ctx context.Context, r RefusedRelease) error
	// ReleaseLog returns the pushes seen that q selects, each with its
	// fate (rfcs/0006 §Release log), newest first.
	ReleaseLog(ctx context.Context, q ReleaseQuery) ([]proto.Release, error)
	// Manifest returns the manifest a rollout serves (ErrNotFound).
	Manifest(ctx context.Context, rolloutID string) (Manifest, error)
	// ReplaceManifest swaps the manifest a rollout serves, for a re-signed
	// manifest of the same plan, and updates the rollout's manifest hash
	// (ErrNotFound).
	ReplaceManifest(ctx context.Context, m Manifest) error
}

// HostStore is what hosts report (statuses, check-ins, activations, probes)
// and each host's place in the rollout that drives it.
type HostStore interface {
	// RecordStatus stores a host's status when it differs from the stored
	// one, and reports whether it did. A status without an activation keeps
	// the stored activation. It records no check-in: nothing is said at a
	// time (check-ins go through RecordCheckin, RecordStatuses and
	// TouchHosts).
	RecordStatus(ctx context.Context, hostname string, st HostStatus) (changed bool, err error)
	// TouchHosts records check-ins in one batch: last-seen times (a time
	// not after the stored one is ignored), and when the stored status was
	// last said (a check-in whose Said is the stored status's digest). It
	// returns the hosts whose check-in carried another status than the
	// one stored: a write of it the store lost (or one in flight); the
	// caller writes it again.
	TouchHosts(ctx context.Context, seen map[string]Seen) (unsaid []string, err error)
	// RecordCheckin records, in one transaction, a check-in the reconciler
	// may have to see at once: the status, when st is set (written only if
	// it changed, its activation ignored as RecordStatus does), and, when
	// it changed or urgent is set, the last-seen time seen, as a change a
	// tick must see. It reports whether the status changed and whether
	// anything was written.
	RecordCheckin(ctx context.Context, hostname string, st *HostStatus, seen time.Time, urgent bool) (changed, written bool, err error)
	// RecordStatuses records several hosts' check-ins and activations in
	// one transaction (one commit for many: the control plane's status
	// batcher), each as RecordCheckin or RecordActivation would; the
	// writes of one host apply in the order given. It returns a result
	// per write, or an error for all of them.
	RecordStatuses(ctx context.Context, ws []StatusWrite) ([]StatusResult, error)
	// RecordActivation stores the latest activation outcome a host
	// reported (a confirm, a report), leaving the rest of its status alone.
	RecordActivation(ctx context.Context, hostname string, a reconciler.Activation) error
	// RecordProbes stores a host's health results reported apart from a
	// check-in, leaving the rest of its status alone, and returns the
	// status as stored and whether it changed.
	RecordProbes(ctx context.Context, hostname string, probes reconciler.ProbeSummary, failedUnits []string) (HostStatus, bool, error)
	// Host returns one host (ErrNotFound when it neither checked in nor is
	// in any rollout).
	Host(ctx context.Context, hostname string) (HostRecord, error)
	// Hosts returns every host that checked in or is in a rollout, by name.
	Hosts(ctx context.Context) ([]HostRecord, error)
	// Assignments returns, for every host in a rollout, its assignment.
	Assignments(ctx context.Context) (map[string]reconciler.Assignment, error)
	// HostPage returns a page of the hosts Hosts returns and of the hosts
	// of q.Fleet, by name, that q's filters select by their assignment
	// (or, for a host of the fleet in no rollout, by its channel), reading
	// only what the page needs; Next continues it.
	HostPage(ctx context.Context, q HostQuery) (HostPage, error)
	// LastSeen returns the last-seen times of the named hosts that have
	// one.
	LastSeen(ctx context.Context, names []string) (map[string]time.Time, error)
	// PruneHosts forgets the hosts that left the fleet: the status,
	// last-seen time and activation time of every host inFleet does not
	// name, no live rollout lists, and not heard from at or after before.
	// It returns them.
	PruneHosts(ctx context.Context, inFleet func(hostname string) bool, before time.Time) ([]string, error)
}

// IntentStore is operator intents and their results.
type IntentStore interface {
	// AddIntent records an operator intent (ErrDuplicate for a known id).
	AddIntent(ctx context.Context, in reconciler.Intent) error
	// AddSignedIntent records an intent with the signed document it was
	// filed with (ErrDuplicate for a known id: a replay).
	AddSignedIntent(ctx context.Context, in reconciler.Intent, signed *proto.SignedIntent) error
	// Intents returns the intents of a rollout (every intent when
	// rolloutID is empty), oldest first, with their results and signed
	// documents: what an audit checks (rfcs/0007 §Signed intents).
	Intents(ctx context.Context, rolloutID string) ([]IntentRecord, error)
	// Intent returns an intent and its result (ErrNotFound).
	Intent(ctx context.Context, id string) (IntentRecord, error)
}

// RolloutStore is rollouts, their plans and hosts, their canary analysis
// measurements, and their forecasts with the hosts' activation times they
// model.
type RolloutStore interface {
	// Rollouts returns every rollout without hosts, newest first.
	Rollouts(ctx context.Context) ([]reconciler.Rollout, error)
	// Rollout returns a rollout with its hosts (ErrNotFound).
	Rollout(ctx context.Context, id string) (reconciler.Rollout, error)
	// RolloutPage returns a page of rollout summaries (no hosts, no
	// edges, host windows or budgets' host lists; their hosts counted by
	// wave and state), newest first; Next continues it.
	RolloutPage(ctx context.Context, q RolloutQuery) (RolloutPage, error)
	// RolloutView returns a rollout with its whole frozen plan, a page of
	// its hosts by name after after (at most limit; none when limit is
	// negative), and every host counted by wave, state and gate
	// (ErrNotFound).
	RolloutView(ctx context.Context, id, after string, limit int) (RolloutView, error)
	// RolloutHeader returns a rollout's header, without its frozen plan
	// and its hosts (ErrNotFound).
	RolloutHeader(ctx context.Context, id string) (reconciler.Rollout, error)
	// RolloutsByID returns the rollouts of these ids that exist, oldest
	// first, as a host's view needs them: without their hosts, their
	// edges and their budgets' host lists (at 100,000 hosts those lists
	// are most of a plan's bytes).
	RolloutsByID(ctx context.Context, ids []string) ([]reconciler.Rollout, error)
	// LatestRollouts returns the id of each channel's latest rollout, by
	// channel.
	LatestRollouts(ctx context.Context) (map[string]string, error)
	// RecordMeasurement stores a canary analysis measurement (rfcs/0003
	// rule 16) unless one of the same rollout, wave, analysis and seq is
	// stored already, and reports whether it stored it.
	RecordMeasurement(ctx context.Context, m reconciler.Measurement) (bool, error)
	// Measurements returns the measurements of a rollout's wave, by
	// analysis and seq.
	Measurements(ctx context.Context, rolloutID string, wave int) ([]reconciler.Measurement, error)
	// PutForecasts records the latest forecast of each rollout given,
	// replacing the one before, and keeps each rollout's first (the
	// FirstMadeAt and FirstEnd of the row already there; a rollout's
	// first put sets them from its MadeAt and End, whatever the caller
	// passes). A forecast older than the one stored (MadeAt before it) is
	// ignored, so that a slow forecaster never overwrites a newer one. A
	// rollout the store does not have is skipped. It takes no tick lock.
	// A Body over MaxForecastBody returns ErrTooLarge, and nothing is
	// written.
	PutForecasts(ctx context.Context, fs []Forecast) error
	// Forecast returns a rollout's latest forecast (ErrNotFound when none).
	Forecast(ctx context.Context, rolloutID string) (Forecast, error)
	// PutActivationTimes records each host's activation time given
	// (rfcs/0014), replacing the one stored (a host given twice keeps the
	// last), Typical in whole milliseconds (rounded down). It takes no
	// tick lock. An empty Host, a negative Typical or Samples below 1
	// returns an error, and nothing is written.
	PutActivationTimes(ctx context.Context, ts []ActivationTime) error
	// ActivationTimes returns every host's activation time, by host.
	ActivationTimes(ctx context.Context) (map[string]ActivationTime, error)
}

// JournalStore is the journal, and retention of it and of finished rollouts.
type JournalStore interface {
	// AppendEvents writes events outside a tick (a release refused by
	// verification), stamped at.
	AppendEvents(ctx context.Context, at time.Time, events []reconciler.Event) error
	// Events returns the journal entries q selects, as the operator API
	// shows them (rfcs/0012 §Events), in id order: after q.AfterID, at
	// most q.Limit (DefaultEventLimit when zero or negative, at most
	// MaxEventLimit).
	Events(ctx context.Context, q proto.EventQuery) ([]proto.Event, error)
	// Prune deletes events older than before, terminal rollouts (with
	// their hosts, manifests, measurements and forecasts) last updated
	// before it that are not the latest of their channel, and the refs of
	// the release log whose fate is settled and last changed before it. It returns how many
	// events and rollouts went, and keeps the newest event id it deleted
	// as Watermark.PrunedEvents.
	Prune(ctx context.Context, before time.Time) (events, rollouts int64, err error)
}

// LeaseStore is named leases with fencing epochs: the tick's leader
// election.
type LeaseStore interface {
	// AcquireLease takes the named lease for holder until now+ttl if it is
	// free, expired, or already the holder's (ErrLeaseHeld otherwise). A
	// change of holder increases the epoch.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration, now time.Time) (Lease, error)
	// RenewLease extends a held lease to now+ttl, never back (a tick may
	// have extended it further), and returns it with its expiry
	// (ErrNotLeader when the lease changed holder or epoch, or expired
	// before now). It never waits for a tick on PostgreSQL.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration, now time.Time) (Lease, error)
	// ReleaseLease gives a held lease up at once.
	ReleaseLease(ctx context.Context, l Lease) error
}

// WebStore is dashboard sign-ins and sessions (rfcs/0011).
type WebStore interface {
	// AddWebLogin records a dashboard sign-in (ErrDuplicate for a known
	// TokenHash; an error when a field is empty or SessionTTL is shorter
	// than a microsecond).
	AddWebLogin(ctx context.Context, l WebLogin) error
	// RedeemWebLogin exchanges a sign-in for a session, once — also when
	// replicas race for it — and only while now is before the login's
	// Expires. The session's Hash is sessionHash, Created now and Expires
	// now+SessionTTL. ErrNotFound when the token is unknown, expired or
	// already redeemed.
	RedeemWebLogin(ctx context.Context, tokenHash, sessionHash string, now time.Time) (WebSession, error)
	// WebSession returns a session by its hash (ErrNotFound when it is
	// unknown, ended, or expired at or before now).
	WebSession(ctx context.Context, hash string, now time.Time) (WebSession, error)
	// EndWebSession ends a session at once (sign out); ending an unknown
	// one does nothing.
	EndWebSession(ctx context.Context, hash string) error
	// PruneWebSessions deletes the dashboard sign-ins and sessions that
	// expired before now, and returns how many went.
	PruneWebSessions(ctx context.Context, now time.Time) (int64, error)
}

// NotifyStore is notification cursors (rfcs/0006 §Notifications): each
// webhook sink's place in the journal, the id of the last event it was sent
// or passed; the leader's notifier moves them.
type NotifyStore interface {
	// StartNotificationCursor returns a sink's cursor, setting it to at
	// (stamped now) first when the sink has none.
	StartNotificationCursor(ctx context.Context, sink string, at int64, now time.Time) (int64, error)
	// AdvanceNotificationCursor moves a sink's cursor from from to to (a
	// later event), stamped now, only if it is at from: ErrCursorMoved
	// when it is elsewhere, ErrNotFound when the sink has none.
	AdvanceNotificationCursor(ctx context.Context, sink string, from, to int64, now time.Time) error
	// NotificationCursors returns every sink's cursor, by sink name.
	NotificationCursors(ctx context.Context) ([]NotificationCursor, error)
	// DeleteNotificationCursors deletes the cursors of the sinks not in
	// keep that last moved before before, and returns how many went.
	DeleteNotificationCursors(ctx context.Context, keep []string, before time.Time) (int64, error)
}
