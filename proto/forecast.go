package proto

import "time"

// Forecast is GET /v1/rollouts/{id}/forecast: when the control plane
// expects a rollout's waves and hosts to move, and what decides it
// (rfcs/0014). Its leader makes one beside its ticks, from the state a
// tick left, and revises it as ticks go on.
type Forecast struct {
	RolloutID string `json:"rolloutId"`
	// MadeAt is the time the forecast starts from: a tick's.
	MadeAt time.Time `json:"madeAt"`
	// State is the rollout's state when the forecast ends; End when it
	// gets there, if that is a terminal state (absent otherwise).
	State string     `json:"state"`
	End   *time.Time `json:"end,omitempty"`
	// Waiting is what a rollout that does not end waits for: an approval
	// owed, a freeze without end, a host silent for good.
	Waiting *DecisionReason `json:"waiting,omitempty"`
	// Cut is why the forecast stopped before the rollout ended: horizon
	// or ticks (its bounds), waiting (nothing to come changes anything).
	Cut string `json:"cut,omitempty"`
	// Assumes is what the forecast assumed of the hosts and the people.
	Assumes ForecastModel `json:"assumes"`
	// FirstMadeAt and FirstEnd are the rollout's first forecast's, kept
	// to set against what happened.
	FirstMadeAt time.Time  `json:"firstMadeAt"`
	FirstEnd    *time.Time `json:"firstEnd,omitempty"`
	// Waves, by index.
	Waves []ForecastWave `json:"waves"`
	// Hosts are the hosts not converged when the forecast was made, by
	// expected dispatch and name, at most MaxForecastHosts; HostsOmitted
	// counts the rest.
	Hosts        []ForecastHost `json:"hosts"`
	HostsOmitted int            `json:"hostsOmitted,omitempty"`
}

// MaxForecastHosts bounds the hosts of a Forecast.
const MaxForecastHosts = 2000

// ForecastModel says what a forecast assumed (rfcs/0014 §Contract).
type ForecastModel struct {
	// Activation is how long a host takes to switch, Checkin how often a
	// connected agent checks in (Go durations). Measured hosts of the
	// rollout take their own time instead, from their past activations;
	// Activation is then the median of the fleet's measured times.
	Activation string `json:"activation"`
	Measured   int    `json:"measured,omitempty"`
	// Reboot, for a rollout that reboots its staged hosts, is how long a
	// reboot takes from its order to the new boot's confirm: the median
	// of the fleet's latest measured reboots, or a default.
	Reboot  string `json:"reboot,omitempty"`
	Checkin string `json:"checkin"`
	// Approvals: "only those given": an approval a wave needs is not
	// assumed.
	Approvals string `json:"approvals"`
	// Silent: "stay silent": a host not heard now is not assumed back.
	Silent string `json:"silent"`
}

// ForecastWave is one wave's expected course.
type ForecastWave struct {
	Index int    `json:"index"`
	Name  string `json:"name,omitempty"`
	// Start is when its first host is expected to be dispatched, Done
	// when it is expected to be promoted (absent: not within the
	// forecast, or before it).
	Start *time.Time `json:"start,omitempty"`
	Done  *time.Time `json:"done,omitempty"`
	// Gate is what decides Start: the gate that holds its first host
	// until then.
	Gate *DecisionReason `json:"gate,omitempty"`
}

// HostExpectation is what a rollout's forecast expects of one host
// (GET /v1/hosts/{name}).
type HostExpectation struct {
	// MadeAt is the forecast's.
	MadeAt time.Time `json:"madeAt"`
	// Dispatch and Converged are when the host is expected to be
	// dispatched and to converge (absent: not within the forecast, or
	// before it); Gate is what holds it until its dispatch.
	Dispatch  *time.Time      `json:"dispatch,omitempty"`
	Converged *time.Time      `json:"converged,omitempty"`
	Gate      *DecisionReason `json:"gate,omitempty"`
	// ByWave: the forecast lists too many hosts to name this one, and
	// these are its wave's start and end.
	ByWave bool `json:"byWave,omitempty"`
}

// ForecastHost is one host's expected course.
type ForecastHost struct {
	Host string `json:"host"`
	Wave int    `json:"wave"`
	// Dispatch and Converged are when it is expected to be dispatched
	// and to converge (absent: not within the forecast, or before it).
	Dispatch  *time.Time `json:"dispatch,omitempty"`
	Converged *time.Time `json:"converged,omitempty"`
	// Gate is what holds it until its dispatch.
	Gate *DecisionReason `json:"gate,omitempty"`
}
