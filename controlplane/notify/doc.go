// Package notify sends the control plane's journal to webhook sinks: a
// rollout opened, a wave promoted, a rollout halted, reverted, converged
// or failed, a wave that needs approval, partial visibility, a release
// refused, an analysis that ended (rfcs/0006 §Notifications).
//
// Contract:
//
//  1. The journal is the outbox. Each sink has a cursor in the store, the
//     id of the last event it was sent or passed (store.Store's
//     notification cursors); a sink that has none starts at the
//     journal's end: it is not sent history.
//  2. Only the replica that holds the tick lease sends (Options.Leader),
//     one goroutine per sink: it reads the events after its cursor in id
//     order (ids grow in commit order), passes those its filter refuses
//     (Sink.Accepts, CategoryOf), POSTs each other one, and moves the
//     cursor past it, with a compare-and-set, after a 2xx answer. It
//     wakes when the journal grows (Options.Signal) and, as a backstop,
//     every Options.Poll.
//  3. A failed POST (no answer, an answer that is not 2xx, a redirect) is
//     tried again, the same event, forever, after Sink.Backoff: order is
//     kept per sink, and a sink that is down holds only itself. No store
//     connection or lock is held while a POST is in flight, so a slow
//     sink slows no tick and no check-in.
//  4. Losing the lease stops sending before the next POST; the next
//     leader starts from the stored cursor, so a takeover sends nothing
//     twice. When Run's context ends, a POST in flight is finished (within
//     the sink's timeout) and its cursor written before Run returns: the
//     control plane gives its lease up only after that.
//  5. Delivery is at least once: a replica killed between a sink's 2xx and
//     the cursor's write sends that event again after the restart. Every
//     POST carries X-Nixfleet-Delivery (<sink>/<event id>), the same for
//     every attempt, for receivers to drop duplicates.
//  6. Retention (store.Store.Prune) may delete events a sink that was down
//     for longer never got: the notifier logs it and counts it
//     (Metrics.Pruned) and goes on with the events left.
//
// Bodies (Body): json is {version, deliveryId, sink, category, summary,
// event}, event as GET /v1/events shows it; slack is {"text": summary}
// (Slack and Mattermost incoming webhooks); alertmanager is the body of
// Alertmanager's POST /api/v2/alerts. With a secret, X-Nixfleet-Signature
// is "sha256=" and the hex HMAC-SHA256 of the exact body, the form the
// control plane's own git webhook checks.
package notify
