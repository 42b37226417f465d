// Package probe runs the agent's health probes (rfcs/0008-agent.md
// §Health probes): the failed-units check (failed systemd units) and http,
// tcp and exec probes, each on its own interval. Their latest results feed
// a check-in's probes and failed units (proto.CheckinRequest), and a
// probe_results report whenever they change; the agent reads them through
// its Health interface, which *Runner implements.
//
// The contract:
//
//  1. Load (or Parse) reads a probes file and validates it; every
//     validation error wraps ErrConfig and names the probe and the field,
//     decoding errors wrap proto.ErrMalformed. Without a file, the
//     configuration is DefaultConfig: no probes, the failed-units check on.
//  2. NewRunner takes a configuration; RunOnce runs everything once (the
//     agent does so before its first check-in), Run runs each probe on its
//     own ticker until its context ends.
//  3. Summary gives the results for a check-in. A probe that has not
//     completed a run yet counts as passing; a failed-units command that
//     cannot run reports the pseudo-unit ErrorFailedUnits, so a broken
//     check looks unhealthy, never healthy.
//  4. Changed signals a change of what Summary returns.
//  5. A run cut short because the runner's context ended is discarded:
//     stopping the runner never flips a probe to failing.
//
// Commands (exec probes, the failed-units command) run without a shell, in
// their own process group, killed as a whole at their timeout. http probes
// never go through a proxy and never follow redirects.
//
// The probes file (JSON, decoded with proto.Decode: duplicate members and
// type errors refused, unknown members tolerated):
//
//	{
//	  "failedUnits": {"enabled": true,
//	                  "command": ["systemctl", "--failed", "--plain", "--no-legend", "--no-pager"],
//	                  "ignore": ["user@*.service"], "interval": "30s", "timeout": "5s"},
//	  "probes": [
//	    {"name": "web", "type": "http", "url": "http://127.0.0.1:8080/health", "expectStatus": 200,
//	     "interval": "10s", "timeout": "2s"},
//	    {"name": "db", "type": "tcp", "address": "127.0.0.1:5432"},
//	    {"name": "disk", "type": "exec", "command": ["/usr/bin/test", "-w", "/var"]}
//	  ]
//	}
package probe
