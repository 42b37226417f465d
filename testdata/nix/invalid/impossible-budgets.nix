# Disruption budgets that can never admit a host.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
in
{
  input = fleet // {
    disruptionBudgets = [
      {
        selector.tags = [ "web" ];
        maxInFlight = 0;
      }
      {
        selector.all = true;
        maxInFlightPct = 20;
      }
      {
        selector.all = true;
        maxInFlightPct = 0;
      }
      {
        selector.tags = [ "db" ];
        maxInFlightPct = 150;
      }
      {
        selector.all = true;
        maxInFlight = 1;
        maxInFlightPct = 50;
      }
    ];
  };
  errors = [
    "disruptionBudgets[0]: maxInFlight 0 can never admit a host"
    "disruptionBudgets[1]: maxInFlightPct 20 of 4 hosts rounds down to 0 and can never admit a host"
    "disruptionBudgets[2]: maxInFlightPct 0 must be between 1 and 100"
    "disruptionBudgets[3]: maxInFlightPct 150 must be between 1 and 100"
  ];
}
