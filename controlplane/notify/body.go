package notify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nixfleet/nixfleet/codes"
	"github.com/nixfleet/nixfleet/proto"
	"github.com/nixfleet/nixfleet/reconciler"
)

// BodyVersion is the version of the json body.
const BodyVersion = 1

// Message is the json body: one event for one sink.
type Message struct {
	Version int `json:"version"`
	// DeliveryID is <sink>/<event id>, as X-Nixfleet-Delivery: the same
	// for every attempt, for receivers to drop duplicates.
	DeliveryID string      `json:"deliveryId"`
	Sink       string      `json:"sink"`
	Category   Category    `json:"category"`
	Summary    string      `json:"summary"`
	Event      proto.Event `json:"event"`
}

// DeliveryID is the id of an event's delivery to a sink: <sink>/<event id>.
func DeliveryID(sink string, eventID int64) string {
	return sink + "/" + strconv.FormatInt(eventID, 10)
}

// Signature is the X-Nixfleet-Signature of a body: "sha256=" and the hex
// HMAC-SHA256 of the body with the secret.
func Signature(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Body writes an event of a category in a sink's format.
func Body(s Sink, c Category, e proto.Event) ([]byte, error) {
	summary := Summary(e)
	switch s.withDefaults().Format {
	case FormatSlack:
		return marshal(struct {
			Text string `json:"text"`
		}{slackEscape(summary)})
	case FormatAlertmanager:
		return marshal([]alert{alertOf(c, e, summary)})
	case FormatJSON:
		return marshal(Message{Version: BodyVersion, DeliveryID: DeliveryID(s.Name, e.ID), Sink: s.Name,
			Category: c, Summary: summary, Event: e})
	}
	return nil, fmt.Errorf("notify: unknown format %q", s.Format)
}

// marshal is json.Marshal without its HTML escapes (<, >, & stay as they
// are: the bodies are read by programs and people, not browsers).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// Summary is one line that says what an event means, for people:
//
//	staging@2c5b9d5b2656: Active → Halted [health_failure] 1 host(s) failed, …
//	channel prod: release refused [stale] …
func Summary(e proto.Event) string {
	var what string
	switch e.Kind {
	case reconciler.EventRolloutOpened:
		what = "rollout opened"
	case reconciler.EventWavePromoted:
		what = fmt.Sprintf("wave %d promoted", e.Wave)
	case reconciler.EventApprovalNeeded:
		what = fmt.Sprintf("wave %d needs approval", e.Wave)
	case reconciler.EventPartialVisibility:
		what = "partial visibility"
	case reconciler.EventVisibilityRestored:
		what = "visibility restored"
	case EventReleaseRejected:
		what = "release refused"
	case reconciler.EventAnalysisCompleted:
		what = fmt.Sprintf("wave %d analysis ended", e.Wave)
	case EventForecast:
		what = "forecast"
	default:
		what = e.Kind
		if e.From != "" || e.To != "" {
			what = e.From + " → " + e.To
		}
	}
	var b strings.Builder
	b.WriteString(subject(e))
	b.WriteString(": ")
	b.WriteString(what)
	if e.Reason.Code != "" {
		b.WriteString(" [" + e.Reason.Code + "]")
	}
	if e.Reason.Message != "" {
		b.WriteString(" " + e.Reason.Message)
	}
	if e.Reason.Actor != "" {
		b.WriteString(" (by " + e.Reason.Actor + ")")
	}
	return oneLine(b.String())
}

// subject names what an event is about: its rollout, its ref shortened
// ("stable@2c5b9d5b2656"), else its channel, else the fleet.
func subject(e proto.Event) string {
	if e.RolloutID != "" {
		ch, ref, ok := strings.Cut(e.RolloutID, "@")
		if ok && len(ref) > 12 && isHex(ref) {
			return ch + "@" + ref[:12]
		}
		return e.RolloutID
	}
	if e.Channel != "" {
		return "channel " + e.Channel
	}
	return "fleet"
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// oneLine makes line breaks and other control characters spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// slackEscape escapes what Slack's and Mattermost's message text reads as
// markup (&, < and >).
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// alert is one alert of Alertmanager's API v2 (postableAlert).
type alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      *time.Time        `json:"endsAt,omitempty"`
}

// alertOf makes an event an alert named NixfleetRollout<Category>
// (NixfleetRolloutHalted, …), labelled with its severity, rollout,
// channel and category, starting at the event. It has no end, so
// Alertmanager resolves it after its resolve_timeout, but for
// visibility_restored, which resolves the alert of the partial
// visibility it ends (same labels).
func alertOf(c Category, e proto.Event, summary string) alert {
	labels := map[string]string{"alertname": "NixfleetRollout" + camel(string(c)), "severity": severity(c, e), "category": string(c)}
	for k, v := range map[string]string{"rollout": e.RolloutID, "channel": e.Channel} {
		if v != "" {
			labels[k] = v
		}
	}
	desc := e.Reason.Message
	if e.Reason.Code != "" {
		desc = strings.TrimSpace(desc + " (" + e.Reason.Code + ")")
	}
	a := alert{Labels: labels, Annotations: map[string]string{"summary": summary, "description": oneLine(desc)}, StartsAt: e.At.UTC()}
	if e.Kind == reconciler.EventVisibilityRestored {
		end := e.At.UTC()
		a.EndsAt = &end
	}
	return a
}

// severity is an alert's: critical for a rollout halted, reverted or
// failed; warning for what needs a look (a release refused, partial
// visibility, an approval, an analysis that did not pass, a forecast end
// that moved); info for the rest.
func severity(c Category, e proto.Event) string {
	switch c {
	case CategoryHalted, CategoryReverted, CategoryFailed:
		return "critical"
	case CategoryReleaseRefused, CategoryPartialVisibility, CategoryApprovalNeeded:
		return "warning"
	case CategoryAnalysis:
		if e.Reason.Code == codes.AnalysisFailed || e.Reason.Code == codes.AnalysisInconclusive {
			return "warning"
		}
	case CategoryForecast:
		if e.Reason.Code == codes.ForecastMoved {
			return "warning"
		}
	}
	return "info"
}

// camel makes snake_case CamelCase.
func camel(s string) string {
	var b strings.Builder
	for _, w := range strings.Split(s, "_") {
		if w != "" {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}
