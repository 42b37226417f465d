# A channel whose rollout policy does not exist: it has no waves, so its
# hosts are not listed by any either.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
in
{
  input = fleet // {
    channels = fleet.channels // {
      edge = fleet.channels.edge // {
        rolloutPolicy = "canary";
      };
    };
  };
  errors = [
    "channel \"edge\": rollout policy \"canary\" does not exist"
    "host \"e\": no wave of channel \"edge\" lists it, so it would never be rolled out"
  ];
}
