# Freshness windows: below twice the signing interval (one missed signing
# run would strand hosts), zero, and over 366 days.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
in
{
  input = fleet // {
    channels = {
      stable = fleet.channels.stable // {
        freshnessWindow = 90;
        signingIntervalMinutes = 60;
      };
      edge = fleet.channels.edge // {
        freshnessWindow = 0;
      };
      lts = {
        rolloutPolicy = "all";
        freshnessWindow = 600000;
      };
    };
  };
  errors = [
    "channel \"edge\": freshnessWindow 0 must be between 1 and 527040 minutes"
    "channel \"lts\": freshnessWindow 600000 must be between 1 and 527040 minutes"
    "channel \"stable\": freshnessWindow (90) must be >= 2 × signingIntervalMinutes (60), so one missed signing run does not strand hosts"
  ];
}
