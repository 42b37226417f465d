// Package controlplane is nixfleet's control plane: it turns the pure
// reconciler into a service (rfcs/0006-control-plane.md, the protocol in
// rfcs/0007-protocol.md).
//
// A replica:
//
//  1. watches the fleet repository's channel refs (refs/heads/channels/*)
//     with go-git, by polling and on a signed webhook, and stores every
//     release that verifies against its trust roots; a release that fails
//     is an event and a metric and never replaces the last verified one;
//  2. elects one replica to tick (a lease in the store) and ticks every
//     TickInterval, when a deadline the last tick named comes, and at once
//     on a status change, a release or an operator intent (kicks within
//     Debounce of a tick's start become one tick at the window's end):
//     each tick is one store transaction around reconciler.Reconcile on
//     the input the store keeps between the leader's ticks, which
//     reads its clock after the tick lock and keeps the control plane's
//     watch over its hosts (a gap restarts it, so that no host is judged
//     silent for what the control plane could not hear);
//  3. serves agents (check-in with long-poll, confirm, signed reports,
//     manifests as signed) and operators (rollouts, events, intents, hosts,
//     status) over HTTPS with client certificates whose keys are the
//     identities: a host's CI-signed SSH host key, or an operator's key
//     with a role; each identity, and each address without one, has a
//     rate limit (429 with Retry-After past it; probes are never limited);
//     lists answer bounded pages by cursor (hosts, rollout summaries, a
//     rollout's hosts) and an event stream reads only new events, so no
//     answer or read grows with the fleet's history (pages.go); the host
//     list adds the hosts of the signed fleet, kept in memory with the host
//     keys, to those the store knows (roster.go); a check-in
//     of a host waiting in an active rollout may carry a fetch slot to
//     prefetch its coming closure, at most PrefetchConcurrency at once
//     per replica (prefetch.go);
//  4. exports Prometheus metrics and structured JSON logs.
//
// All state lives in the store (package store): a replica can be killed
// at any point and restarted, and several replicas can share one
// PostgreSQL.
package controlplane
