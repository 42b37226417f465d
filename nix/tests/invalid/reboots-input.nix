# Reboot input fleet.resolved cannot carry: a reboot step that is not an
# attribute set, unknown, missing and mistyped members, a wave's reboot
# that is not a boolean, and a bootLoader that is not a string. A null
# reboot (of a policy or a wave) and a null bootLoader are none. Only
# input problems: the mistyped members are left out of the document's
# checks.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  inherit (c.fleet.rolloutPolicies.all) waves;
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      a = c.fleet.hosts.a // {
        bootLoader = 1;
      };
      b = c.fleet.hosts.b // {
        bootLoader = null;
      };
    };
    rolloutPolicies = {
      all = {
        reboot = "yes";
        waves = [
          {
            selector.all = true;
            reboot = "no";
          }
          {
            selector.all = true;
            reboot = null;
          }
        ];
      };
      mistyped = {
        inherit waves;
        reboot = {
          allowed = "true";
          bootTimeoutMinutes = "15";
          kexec = 1;
          timeout = 15;
        };
      };
      missing = {
        inherit waves;
        reboot = { };
      };
      none = {
        inherit waves;
        reboot = null;
      };
    };
  };
  errors = [
    "host \"a\": bootLoader must be a string (\"systemd-boot\", \"grub\" or \"none\") or null"
    "rollout policy \"all\" wave 0: reboot must be a boolean (whether the control plane may reboot the wave's hosts)"
    "rollout policy \"all\": reboot: must be an attribute set, not a string"
    "rollout policy \"missing\": reboot: allowed is required"
    "rollout policy \"missing\": reboot: bootTimeoutMinutes is required"
    "rollout policy \"mistyped\": reboot: unknown attribute \"timeout\""
    "rollout policy \"mistyped\": reboot: allowed must be a boolean"
    "rollout policy \"mistyped\": reboot: bootTimeoutMinutes must be an integer (minutes, 1 to 1440)"
    "rollout policy \"mistyped\": reboot: kexec must be a boolean"
  ];
}
