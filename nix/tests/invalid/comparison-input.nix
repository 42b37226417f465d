# Comparison input fleet.resolved cannot carry: a compare that is not an
# attribute set, unknown, missing and mistyped members (numbers must be
# decimal strings, as the document writes them). A null compare is none.
# Only input problems: mistyped members take their defaults (worse is
# null) and are left out of the document's checks.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  waves = c.fleet.rolloutPolicies.all.waves;
  analysis = name: compare: {
    inherit name;
    query = ''sum(rate(errors_total{host=~"{{ .HostsRegex }}"}[2m]))'';
    successCondition = "result < 0.01";
    inherit compare;
  };
in
{
  input = c.fleet // {
    rolloutPolicies = {
      all = {
        inherit waves;
        healthGate.analysis = [
          (analysis "a" "higher")
          (analysis "b" {
            worse = "higher";
            confidence = 0.95;
            effect = 0;
            minSamples = "10";
            window = 600;
            step = null;
            baseline = "previous";
          })
          (analysis "c" { })
          (analysis "d" {
            worse = true;
          })
        ];
      };
      none = {
        inherit waves;
        healthGate.analysis = [ (analysis "e" null) ];
      };
    };
  };
  errors = [
    "rollout policy \"all\": healthGate.analysis[0]: compare: must be an attribute set, not a string"
    "rollout policy \"all\": healthGate.analysis[1]: compare: unknown attribute \"baseline\""
    "rollout policy \"all\": healthGate.analysis[1]: compare: confidence must be a string such as \"0.95\" (from 0.5 to 0.999)"
    "rollout policy \"all\": healthGate.analysis[1]: compare: effect must be a string such as \"0.01\" (at least 0)"
    "rollout policy \"all\": healthGate.analysis[1]: compare: minSamples must be an integer (values per group, 3 to 10000)"
    "rollout policy \"all\": healthGate.analysis[1]: compare: window must be a string such as \"10m\""
    "rollout policy \"all\": healthGate.analysis[2]: compare: worse is required"
    "rollout policy \"all\": healthGate.analysis[3]: compare: worse must be a string, \"higher\" or \"lower\""
  ];
}
