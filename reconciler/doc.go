// Package reconciler is nixfleet's decision procedure: given the verified
// releases of every channel, the rollouts, what the hosts report and what
// operators asked for, Reconcile decides what happens next.
//
// It is a pure function, in the manner of etcd's raft core: it imports
// nothing that does I/O, never reads the clock (Input.Now is the time) and
// uses no randomness, so the same Input always gives the same Output, in
// the same order, and a restarted control plane given the same persisted
// state reaches the same decisions. All state lives in the caller's store:
// the control plane loads an Input, calls Reconcile, and applies the Output
// in one transaction (Apply shows how).
//
// Silence is not failure (rfcs/0013 rule 4, rfcs/0003 rule 6): a host
// the control plane cannot hear is judged only once it is offline, after
// the control plane has watched for an offline threshold
// (Input.WatchingSince), and while its channel is not in partial
// visibility — more than half of its hosts late, which every host of a
// partition is before the first of them is offline. A wave is promoted
// only on evidence (rule 8), and a host's status is judged only as the
// host said it (ObservedHost.StatusAt: a write the store lost is not what
// the host said; rfcs/0013 rule 8).
//
// The rules are numbered in rfcs/0003-reconciler.md; the host and rollout
// state machines (HostState.Next, RolloutState.Next, one transition table
// each) are drawn in rfcs/0004-host-states.md and rfcs/0005-rollout-states.md.
package reconciler
