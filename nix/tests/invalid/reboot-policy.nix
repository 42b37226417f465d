# Reboot steps the Go side refuses (manifest.ValidateFleet): a
# bootTimeoutMinutes outside 1 to 1440 (reported after the policy's other
# problems), and a wave's reboot = true under a policy without a reboot
# step, which would have no boot timeout (reported with the wave's other
# problems, and again on the channel's resolved waves, which copy it). The
# bounds are fine, and so are a wave's reboot = true under a policy that
# does not allow reboots and reboot = false without one.
{ system }:
let
  c = import ../../../testdata/nix/common.nix { inherit system; };
  reboot = allowed: bootTimeoutMinutes: { inherit allowed bootTimeoutMinutes; };
in
{
  input = c.fleet // {
    channels = c.fleet.channels // {
      edge = c.fleet.channels.edge // {
        rolloutPolicy = "without";
      };
    };
    rolloutPolicies = {
      all = {
        reboot = reboot true 0;
        waves = [
          {
            selector.tags = [ "web" ];
            reboot = false;
          }
          { selector.all = true; }
        ];
      };
      bounds = {
        reboot = reboot false 1;
        waves = [
          {
            selector.all = true;
            reboot = true;
          }
        ];
      };
      bounds-high = {
        strategy = "all-at-once";
        reboot = reboot true 1440 // {
          kexec = true;
        };
      };
      past = {
        strategy = "all-at-once";
        reboot = reboot false 1441;
      };
      without = {
        waves = [
          {
            selector.tags = [ "lab" ];
            reboot = true;
            soakMinutes = -1;
          }
          {
            selector.all = true;
            reboot = false;
          }
          {
            selector.all = true;
            reboot = true;
          }
        ];
      };
    };
  };
  errors = [
    "rollout policy \"all\": reboot.bootTimeoutMinutes 0 must be between 1 and 1440"
    "rollout policy \"past\": reboot.bootTimeoutMinutes 1441 must be between 1 and 1440"
    "rollout policy \"without\" wave 0: soakMinutes -1 is negative"
    "rollout policy \"without\" wave 0: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes"
    "rollout policy \"without\" wave 2: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes"
    "waves.edge[0]: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes"
    "waves.edge[0]: soakMinutes -1 is negative"
    "waves.edge[2]: reboot = true without the policy's reboot, which gives its bootTimeoutMinutes"
  ];
}
