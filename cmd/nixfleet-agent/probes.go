package main

import (
	"context"

	"github.com/nixfleet/nixfleet/agent"
	"github.com/nixfleet/nixfleet/agent/probe"
)

// addProbes loads the probes file (none: the failed-units check alone),
// runs the probes once so the first check-in has results, and keeps them
// running until ctx ends; changes are sent at once.
func addProbes(ctx context.Context, cfg *agent.Config, path string) error {
	pc, err := probe.Load(path)
	if err != nil {
		return err
	}
	r := probe.NewRunner(pc)
	r.RunOnce(ctx)
	go r.Run(ctx)
	cfg.Health, cfg.HealthChanged = r, r.Changed()
	return nil
}
