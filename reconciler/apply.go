package reconciler

import "slices"

// Apply returns the state a store holds after persisting out: new and
// changed rollouts and hosts, channels' last rolled refs, the deferrals,
// the channels in partial visibility, and the operator intents consumed. Observations are the caller's: they
// are carried over unchanged. Apply is what the control plane's store does
// in SQL, written as a pure function for tests and simulations; it does not
// modify in.
func Apply(in Input, out Output) Input { return apply(in, out, false) }

// applyOwned is Apply for an input and output nobody else holds (a
// forecast's own, after its first tick): it writes the host updates into
// in's host lists instead of copying them first, which at 100,000 hosts
// is a third of what a simulated tick allocates.
func applyOwned(in Input, out Output) Input { return apply(in, out, true) }

func apply(in Input, out Output, owned bool) Input {
	own := func(hs []RolloutHost) []RolloutHost {
		if owned {
			return hs
		}
		return slices.Clone(hs)
	}
	next := in
	next.Rollouts = make([]Rollout, 0, len(in.Rollouts)+len(out.Rollouts))
	index := map[string]int{}
	for _, r := range in.Rollouts {
		r.Hosts = own(r.Hosts)
		index[r.ID] = len(next.Rollouts)
		next.Rollouts = append(next.Rollouts, r)
	}
	for _, u := range out.Rollouts {
		if u.New {
			index[u.Rollout.ID] = len(next.Rollouts)
			r := u.Rollout
			r.Hosts = own(r.Hosts)
			next.Rollouts = append(next.Rollouts, r)
			continue
		}
		i, ok := index[u.Rollout.ID]
		if !ok {
			continue
		}
		hosts := next.Rollouts[i].Hosts
		next.Rollouts[i] = u.Rollout
		next.Rollouts[i].Hosts = hosts
	}
	hostIndex := map[string]map[string]int{}
	for _, u := range out.Hosts {
		i, ok := index[u.RolloutID]
		if !ok {
			continue
		}
		hosts := next.Rollouts[i].Hosts
		byName := hostIndex[u.RolloutID]
		if byName == nil {
			byName = make(map[string]int, len(hosts))
			for j, h := range hosts {
				byName[h.Hostname] = j
			}
			hostIndex[u.RolloutID] = byName
		}
		if j, ok := byName[u.Host.Hostname]; ok {
			hosts[j] = u.Host
		}
	}
	next.Channels = slices.Clone(in.Channels)
	for _, u := range out.Channels {
		for j := range next.Channels {
			if next.Channels[j].Name == u.Name {
				next.Channels[j].LastRolledRef = u.LastRolledRef
			}
		}
	}
	consumed := map[string]bool{}
	for _, r := range out.IntentResults {
		consumed[r.IntentID] = true
	}
	next.Intents = nil
	for _, it := range in.Intents {
		if !consumed[it.ID] {
			next.Intents = append(next.Intents, it)
		}
	}
	next.Deferrals = slices.Clone(out.Deferrals)
	next.Visibility = slices.Clone(out.Visibility)
	return next
}
