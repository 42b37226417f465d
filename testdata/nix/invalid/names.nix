# Names of budgets and waves: well-formed, at most 40 characters, unique
# among the fleet's budgets (a name may not be another budget's short form
# either) and among a policy's waves. Unnamed budgets of different
# selectors whose short forms coincide only draw a warning.
{ system }:
let
  inherit (import ../common.nix { inherit system; }) fleet;
in
{
  input = fleet // {
    rolloutPolicies.all.waves = [
      {
        name = "first";
        selector.tags = [ "web" ];
      }
      {
        name = "first";
        selector.tags = [ "db" ];
      }
      {
        name = "the rest";
        selector.all = true;
      }
    ];
    disruptionBudgets = [
      {
        name = "web";
        selector.tags = [ "web" ];
        maxInFlight = 1;
      }
      {
        name = "web";
        selector.tags = [ "db" ];
        maxInFlight = 1;
      }
      {
        name = "all";
        selector.hosts = [ "a" ];
        maxInFlight = 1;
      }
      {
        selector.all = true;
        maxInFlight = 2;
      }
      {
        name = "a-name-that-goes-on-for-more-than-forty-chars";
        selector.all = true;
        maxInFlight = 2;
      }
      {
        selector.tagsAny = [
          "web"
          "db"
          "lab"
          "x1"
        ];
        maxInFlight = 1;
      }
      {
        selector.tagsAny = [
          "web"
          "db"
          "lab"
          "x2"
        ];
        maxInFlight = 1;
      }
    ];
  };
  errors = [
    "rollout policy \"all\" wave 1: name \"first\" is already wave 0's"
    "rollout policy \"all\" wave 2: name \"the rest\" must be letters, digits, '.', '_' or '-', at most 40 long"
    "waves.edge[2]: name \"the rest\" must be letters, digits, '.', '_' or '-', at most 40 long"
    "waves.stable[2]: name \"the rest\" must be letters, digits, '.', '_' or '-', at most 40 long"
    "disruptionBudgets[1]: is called \"web\", like disruptionBudgets[0]; budget names must be unique"
    "disruptionBudgets[3]: is called \"all\", like disruptionBudgets[2]; budget names must be unique"
    "disruptionBudgets[4]: name \"a-name-that-goes-on-for-more-than-forty-chars\" must be letters, digits, '.', '_' or '-', at most 40 long"
  ];
  warnings = [
    "disruptionBudgets[6]: is called \"tagsAny=db,lab,web,+1\", like disruptionBudgets[5]; give them names"
  ];
}
