# Health-gate minimums a wave could never, or always trivially, meet:
# minConverged below 1, minConvergedPct outside 1–100. The bounds
# themselves, and a minimum above the number of hosts (capped at a wave's
# size), are fine.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
  waves = fleet.rolloutPolicies.all.waves;
in
{
  input = fleet // {
    rolloutPolicies = {
      all = {
        inherit waves;
        healthGate = {
          minConverged = 0;
          minConvergedPct = 0;
        };
      };
      bounds = {
        inherit waves;
        healthGate = {
          minConverged = 1;
          minConvergedPct = 100;
        };
      };
      large.waves = waves;
      large.healthGate.minConverged = 1000;
      wide = {
        inherit waves;
        healthGate = {
          maxFailures = 0;
          minConverged = -1;
          minConvergedPct = 101;
        };
      };
    };
  };
  errors = [
    "rollout policy \"all\": healthGate.minConverged 0 must be at least 1"
    "rollout policy \"all\": healthGate.minConvergedPct 0 must be between 1 and 100"
    "rollout policy \"wide\": healthGate.minConverged -1 must be at least 1"
    "rollout policy \"wide\": healthGate.minConvergedPct 101 must be between 1 and 100"
  ];
}
