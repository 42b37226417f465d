// Package demo is nixfleet's demo (rfcs/0009 §The demo), run by
// nixfleet-demo: a whole fleet in one process, on 127.0.0.1 and in a
// temporary directory, with no Nix, database or network. Run:
//
//  1. makes a fleet git repository with a CI key and trust roots, an
//     operator key, and a fleet of Options.Hosts simulated hosts on two
//     channels, staging and prod (prod follows staging; canary waves,
//     database hosts before the web hosts of their region, disruption
//     budgets);
//  2. signs release v0, what the hosts run, and starts a control plane
//     (embedded SQLite, TLS) and one simulated agent per host (mutual TLS
//     over its host key), which enrol on v0;
//  3. signs v1 and pushes staging, then prod, and prints the control
//     plane's journal until both converged; staging's second wave gets
//     a new kernel, which its hosts stage, and the control plane reboots
//     them under the budget (rfcs/0003 rule 17);
//  4. signs v2 and pushes staging only: its canary's health probe fails,
//     and the channel's policy (rollback-and-halt) reverts it;
//  5. reads every rollout back from the operator API and checks the
//     outcome: v0 and v1 Converged on every host, v2 Reverted with only
//     its canary moved.
//
// The progress goes to stdout, or to stderr with Options.JSON, when the
// report (every rollout's id, state and host counts) is one JSON document
// on stdout. An error is an *Error with a stable code. The directory is
// removed at the end, unless Options.Keep keeps it, with the control plane
// and agents running, until the context ends; or the demo failed, when it
// holds the control plane's log and database to look at.
package demo
