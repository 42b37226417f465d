# Boot loaders the Go side refuses (manifest.ValidateFleet): one that is
# not systemd-boot, grub or none (only that problem, even on a channel
# that reboots), and none on a channel whose policy lets the control plane
# reboot any wave: by a wave's own reboot = true, or by the policy's
# allowed on a policy rolled out all at once. Loader none is fine where
# no wave reboots (every wave says no, or no reboot step), and so are the
# loaders that can boot once into an entry and hosts that declare no
# loader (c, e).
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  host =
    channel: bootLoader: name:
    c.host channel [ "web" ] name // { inherit bootLoader; };
in
{
  input = c.fleet // {
    hosts = c.fleet.hosts // {
      a = host "stable" "lilo" "a";
      b = host "stable" "none" "b";
      d = host "stable" "grub" "d";
      f = host "stable" "systemd-boot" "f";
      g = host "lab" "none" "g";
      h = host "ct" "none" "h";
      i = host "ct" "Grub" "i";
      j = host "edge" "none" "j";
    };
    channels = c.fleet.channels // {
      stable = c.fleet.channels.stable // {
        rolloutPolicy = "second-wave";
      };
      lab = {
        rolloutPolicy = "opt-out";
        freshnessWindow = 180;
      };
      ct = {
        rolloutPolicy = "at-once";
        freshnessWindow = 180;
      };
    };
    rolloutPolicies = {
      # edge's: no reboot step.
      inherit (c.fleet.rolloutPolicies) all;
      second-wave = {
        reboot = {
          allowed = false;
          bootTimeoutMinutes = 10;
        };
        waves = [
          { selector.tags = [ "web" ]; }
          {
            selector.all = true;
            reboot = true;
          }
        ];
      };
      opt-out = {
        reboot = {
          allowed = true;
          bootTimeoutMinutes = 10;
        };
        waves = [
          {
            selector.all = true;
            reboot = false;
          }
        ];
      };
      at-once = {
        strategy = "all-at-once";
        reboot = {
          allowed = true;
          bootTimeoutMinutes = 10;
        };
      };
    };
  };
  errors = [
    "host \"a\": bootLoader \"lilo\" is not systemd-boot, grub or none"
    "host \"b\": channel \"stable\" lets the control plane reboot hosts (rollout policy \"second-wave\"), but bootLoader \"none\" cannot boot once into an entry; only systemd-boot and grub can"
    "host \"h\": channel \"ct\" lets the control plane reboot hosts (rollout policy \"at-once\"), but bootLoader \"none\" cannot boot once into an entry; only systemd-boot and grub can"
    "host \"i\": bootLoader \"Grub\" is not systemd-boot, grub or none"
  ];
}
