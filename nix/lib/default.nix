# The nixfleet Nix library (rfcs/0010). Builtins only, so it evaluates
# without nixpkgs, from the flake (nixfleet.lib.mkFleet) or directly:
#
#   (import ./nix/lib).mkFleet { hosts = …; channels = …; rolloutPolicies = …; }
{
  mkFleet = import ./mkfleet.nix;
}
