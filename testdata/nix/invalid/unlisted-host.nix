# A host no wave of its channel takes would never be rolled out; a host
# without a configuration is not built, so it need not be.
{ system }:
let
  c = import ../common.nix { inherit system; };
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      spare = {
        system = "x86_64-linux";
        channel = "stable";
      };
    };
    rolloutPolicies.all.waves = [
      { selector.tags = [ "web" ]; }
      {
        selector = {
          all = true;
          not.tagsAny = [
            "db"
            "spare"
          ];
        };
      }
    ];
  };
  errors = [ "host \"c\": no wave of channel \"stable\" lists it, so it would never be rolled out" ];
  warnings = [
    "host \"spare\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
  ];
}
