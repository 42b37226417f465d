# Approval-gate input fleet.resolved cannot carry: a gate that is not an
# attribute set, unknown, missing and mistyped members, and approvers = 0,
# which the document cannot tell from approvers left out (Go's int, 0
# meaning 1), so mkFleet refuses it with the document's message. A null
# gate is none. Only input problems: the mistyped members are left out of
# the document's checks.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
in
{
  input = c.fleet // {
    rolloutPolicies.all.waves = [
      {
        selector.all = true;
        approval = "yes";
      }
      {
        selector.all = true;
        approval = {
          required = "yes";
          approvers = "2";
          approver = 1;
        };
      }
      {
        selector.all = true;
        approval.approvers = 2;
      }
      {
        selector.all = true;
        approval = {
          required = true;
          approvers = 0;
        };
      }
      {
        selector.all = true;
        approval = null;
      }
    ];
  };
  errors = [
    "rollout policy \"all\" wave 0: approval: must be an attribute set, not a string"
    "rollout policy \"all\" wave 1: approval: unknown attribute \"approver\""
    "rollout policy \"all\" wave 1: approval: required must be a boolean"
    "rollout policy \"all\" wave 1: approval: approvers must be an integer (how many distinct approvers, 1 to 100)"
    "rollout policy \"all\" wave 2: approval: required is required"
    "rollout policy \"all\" wave 3: approval.approvers 0 must be between 1 and 100"
  ];
}
