# Approval gates the Go side refuses (manifest.ValidateFleet): more than
# 100 approvers, approvers without required = true, and both at once (a
# negative count on a gate that is not required), in that order within a
# wave. A wave's gate is reported on the policy's wave and again on the
# waves of both channels it is copied to. These need Go's rule, which
# checks approval right after a wave's windows.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
in
{
  input = c.fleet // {
    rolloutPolicies.all.waves = [
      {
        selector.tags = [ "web" ];
        approval = {
          required = true;
          approvers = 101;
        };
      }
      {
        selector.tags = [ "db" ];
        approval = {
          required = false;
          approvers = 2;
        };
      }
      {
        selector.all = true;
        approval = {
          required = false;
          approvers = -1;
        };
      }
    ];
  };
  errors = [
    "rollout policy \"all\" wave 0: approval.approvers 101 must be between 1 and 100"
    "rollout policy \"all\" wave 1: approval.approvers without approval.required = true"
    "rollout policy \"all\" wave 2: approval.approvers -1 must be between 1 and 100"
    "rollout policy \"all\" wave 2: approval.approvers without approval.required = true"
    "waves.edge[0]: approval.approvers 101 must be between 1 and 100"
    "waves.edge[1]: approval.approvers without approval.required = true"
    "waves.edge[2]: approval.approvers -1 must be between 1 and 100"
    "waves.edge[2]: approval.approvers without approval.required = true"
    "waves.stable[0]: approval.approvers 101 must be between 1 and 100"
    "waves.stable[1]: approval.approvers without approval.required = true"
    "waves.stable[2]: approval.approvers -1 must be between 1 and 100"
    "waves.stable[2]: approval.approvers without approval.required = true"
  ];
}
