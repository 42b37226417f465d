package main

import (
	"time"

	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// The answers of the operator API (rfcs/0007 §Operator endpoints) as the
// CLI reads them. --json prints the answers themselves, not these types:
// members the server adds later reach scripts unchanged.

// rolloutView is GET /v1/rollouts/{id}, and a rollout of /v1/rollouts and
// /v1/status.
type rolloutView struct {
	reconciler.Rollout
	Counts  map[reconciler.HostState]int `json:"counts"`
	Waiting map[string]int               `json:"waiting"`
}

// eventView is an event of the journal.
type eventView struct {
	ID int64     `json:"id"`
	At time.Time `json:"at"`
	reconciler.Event
}

// hostView is GET /v1/hosts/{name}, and a host of /v1/hosts.
type hostView struct {
	Hostname     string                  `json:"hostname"`
	Online       bool                    `json:"online"`
	Seen         bool                    `json:"seen"`
	Observed     reconciler.ObservedHost `json:"observed"`
	Rollout      string                  `json:"rollout"`
	Channel      string                  `json:"channel"`
	RolloutState reconciler.RolloutState `json:"rolloutState"`
	Host         *reconciler.RolloutHost `json:"host"`
	Explain      proto.Reason            `json:"explain"`
}

// statusView is GET /v1/status.
type statusView struct {
	Replica     string              `json:"replica"`
	Leader      bool                `json:"leader"`
	InsecureDev bool                `json:"insecureDev"`
	Channels    []channelStatusView `json:"channels"`
}

type channelStatusView struct {
	Name         string       `json:"name"`
	Ref          string       `json:"ref"`
	SourceCommit string       `json:"sourceCommit"`
	SignedAt     time.Time    `json:"signedAt"`
	Rollout      *rolloutView `json:"rollout"`
	Pending      bool         `json:"pending"`
	LastFailure  *struct {
		Commit  string    `json:"commit"`
		Code    string    `json:"code"`
		Message string    `json:"message"`
		At      time.Time `json:"at"`
	} `json:"lastFailure"`
}

// intentView is the answer to an intent.
type intentView struct {
	Intent reconciler.Intent        `json:"intent"`
	Result *reconciler.IntentResult `json:"result"`
}
