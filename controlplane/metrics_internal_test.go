package controlplane

import (
	"maps"
	"testing"

	"github.com/nixfleet/nixfleet/reconciler"
)

// TestCountRollouts: the rollouts a tick leaves, by state, are its
// input's with the changes of its output, a rollout it opened included.
func TestCountRollouts(t *testing.T) {
	in := []reconciler.Rollout{
		{ID: "a@1", State: reconciler.RolloutConverged},
		{ID: "b@1", State: reconciler.RolloutActive},
		{ID: "c@1", State: reconciler.RolloutActive},
	}
	changed := []reconciler.RolloutUpdate{
		{From: reconciler.RolloutActive, Rollout: reconciler.Rollout{ID: "b@1", State: reconciler.RolloutHalted}},
		{New: true, Rollout: reconciler.Rollout{ID: "a@2", State: reconciler.RolloutActive}},
	}
	got := countRollouts(in, changed)
	want := map[reconciler.RolloutState]int{reconciler.RolloutConverged: 1, reconciler.RolloutActive: 2, reconciler.RolloutHalted: 1}
	if !maps.Equal(got, want) {
		t.Fatalf("counted %v, want %v", got, want)
	}
}
