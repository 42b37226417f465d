# Only a policy of strategy "all-at-once" may leave out its waves; for any
# other, a missing wave list is a mistake, not a request to move every
# host at once.
{ system }:
let
  c = import ../common.nix { inherit system; };
in
{
  input = c.fleet // {
    channels = c.fleet.channels // {
      edge = c.fleet.channels.edge // {
        rolloutPolicy = "forgot";
      };
    };
    rolloutPolicies = c.fleet.rolloutPolicies // {
      forgot.strategy = "canary";
    };
  };
  errors = [ "rollout policy \"forgot\": waves is required" ];
}
