# Canary-analysis input fleet.resolved cannot carry: a gate's analysis
# that is not a list, an analysis that is not an attribute set, unknown,
# missing and mistyped members. A null analysis is none. Only input
# problems: the mistyped members are left out of the document's checks
# (the optional ones take their defaults), so a missing name or query is
# not also reported as empty.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  waves = c.fleet.rolloutPolicies.all.waves;
in
{
  input = c.fleet // {
    rolloutPolicies = {
      all = {
        inherit waves;
        healthGate.analysis = [
          "error-rate"
          {
            name = "error-rate";
            query = 1;
            successcondition = "result < 0.01";
            failureCondition = true;
            interval = 60;
            count = "5";
            failureLimit = 1.5;
            inconclusiveLimit = null;
            source = 1;
          }
          { }
          {
            name = null;
            query = "up";
            successCondition = [ "result == 1" ];
          }
        ];
      };
      listless = {
        inherit waves;
        healthGate.analysis = {
          name = "error-rate";
          query = "up";
          successCondition = "result == 1";
        };
      };
      none = {
        inherit waves;
        healthGate.analysis = null;
      };
    };
  };
  errors = [
    "rollout policy \"all\": healthGate.analysis[0]: must be an attribute set, not a string"
    "rollout policy \"all\": healthGate.analysis[1]: unknown attribute \"successcondition\""
    "rollout policy \"all\": healthGate.analysis[1]: successCondition is required"
    "rollout policy \"all\": healthGate.analysis[1]: query must be a string (PromQL)"
    "rollout policy \"all\": healthGate.analysis[1]: failureCondition must be a string such as \"result > 0.05\""
    "rollout policy \"all\": healthGate.analysis[1]: interval must be a string such as \"30s\", \"5m\" or \"1h\""
    "rollout policy \"all\": healthGate.analysis[1]: count must be an integer (measurements, 1 to 1000)"
    "rollout policy \"all\": healthGate.analysis[1]: failureLimit must be an integer (failed measurements tolerated)"
    "rollout policy \"all\": healthGate.analysis[1]: source must be a string (a Prometheus source of the control plane, like \"team-a\")"
    "rollout policy \"all\": healthGate.analysis[2]: name is required"
    "rollout policy \"all\": healthGate.analysis[2]: query is required"
    "rollout policy \"all\": healthGate.analysis[2]: successCondition is required"
    "rollout policy \"all\": healthGate.analysis[3]: name must be a string"
    "rollout policy \"all\": healthGate.analysis[3]: successCondition must be a string such as \"result < 0.01\""
    "rollout policy \"listless\": healthGate: analysis must be a list of { name; query; successCondition; }"
  ];
}
