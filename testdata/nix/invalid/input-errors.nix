# Mistakes in mkFleet's input that fleet.resolved cannot even express, so
# only the Nix side reports them: unknown and missing attributes, wrong
# types, selectors with unknown rules or naming hosts and channels that do
# not exist, a channel edge spelling one end twice.
{ system }:
let
  c = import ../common.nix { inherit system; };
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      t = {
        system = "x86_64-linux";
        channel = "stable";
        tag = [ "web" ];
        configuration = "not a system";
      };
      u = {
        channel = "stable";
        tags = "web";
      };
    };
    channels = c.fleet.channels // {
      edge = {
        rolloutPolicy = "all";
        freshnessWindow = "3h";
      };
    };
    rolloutPolicies.all.healthGate = {
      minConverged = "2";
      minConvergedPct = 0.5;
    };
    rolloutPolicies.all.waves = [
      { selector.tags = [ "web" ]; }
      {
        selector = {
          hostz = [ "a" ];
          hosts = [ "zz" ];
          channel = "nightly";
        };
      }
      { selector.all = true; }
    ];
    channelEdges = [
      {
        gates = "edge";
        before = "edge";
        gated = "stable";
      }
    ];
    disruptionBudgets = [ { maxInFlight = "1"; } ];
    extra = true;
  };
  errors = [
    "mkFleet: unknown attribute \"extra\""
    "host \"t\": unknown attribute \"tag\""
    "host \"t\": configuration must be a NixOS system (what nixpkgs.lib.nixosSystem returns) or null"
    "host \"u\": system is required"
    "host \"u\": tags must be a list of strings"
    "channel \"edge\": freshnessWindow must be an integer (minutes)"
    "rollout policy \"all\" wave 1 selector: unknown selector rule \"hostz\" (known: tags, tagsAny, hosts, channel, all, and, not)"
    "rollout policy \"all\" wave 1 selector: host \"zz\" does not exist"
    "rollout policy \"all\" wave 1 selector: channel \"nightly\" does not exist"
    "rollout policy \"all\": healthGate: minConverged must be an integer"
    "rollout policy \"all\": healthGate: minConvergedPct must be an integer (percent)"
    "channelEdges[0] sets both \"gates\" and its legacy alias \"before\""
    "disruptionBudgets[0]: selector is required"
    "disruptionBudgets[0]: maxInFlight must be an integer or null"
  ];
  # What is left of the broken parts still draws the document's warnings.
  warnings = [
    "host \"t\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
    "host \"u\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
    "rollout policy \"all\" wave 1: selector matches no host"
    "disruptionBudgets[0]: selector matches no host"
    "disruptionBudgets[0]: sets neither maxInFlight nor maxInFlightPct, so it limits nothing"
  ];
}
