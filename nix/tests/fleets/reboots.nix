# Reboots as a step of the rollout (proto.Reboot): the prod policy lets
# the control plane reboot hosts, with a boot timeout and kexec, but not
# in its canary wave (reboot = false); the lab's policy does not reboot
# but its second wave does (reboot = true, with the policy's timeout);
# the edge's has no reboot step (null: none), so its hosts may have boot
# loader none. Loaders come from a host's configuration (systemd-boot
# before grub; neither enabled: none) or from the host itself, which wins;
# a stand-in configuration without boot.loader, and a null bootLoader,
# declare none, and the document leaves bootLoader out. kexec = false is
# left out (Go's omitempty), and so is a wave's null reboot.
{ system }:
let
  # A stand-in configuration whose boot.loader enables the given loaders.
  withLoader =
    loader: name:
    let
      s = system name;
    in
    s // { config = s.config // { boot.loader = loader; }; };
  host = channel: tags: configuration: {
    system = "x86_64-linux";
    inherit channel tags configuration;
  };
in
{
  input = {
    hosts = {
      # systemd-boot wins over grub, as the module system lets both be set.
      web-01 = host "prod" [ "canary" ] (withLoader {
        systemd-boot.enable = true;
        grub.enable = true;
      } "web-01");
      web-02 = host "prod" [ "web" ] (withLoader {
        grub.enable = true;
        systemd-boot.enable = false;
      } "web-02");
      # Given by the host: it wins over its configuration's.
      db-01 = host "prod" [ "db" ] (withLoader { grub.enable = true; } "db-01") // {
        bootLoader = "systemd-boot";
      };
      # A stand-in without boot.loader, and a null bootLoader: none declared.
      db-02 = host "prod" [ "db" ] (system "db-02") // {
        bootLoader = null;
      };
      lab-01 = host "lab" [ "lab" ] (withLoader { grub.enable = true; } "lab-01");
      lab-02 = host "lab" [ "lab" ] (system "lab-02") // {
        bootLoader = "grub";
      };
      # A container: no loader enabled.
      ct-01 = host "edge" [ "ct" ] (withLoader {
        grub.enable = false;
      } "ct-01");
      # A host without a configuration gives its loader.
      ct-02 = {
        system = "x86_64-linux";
        channel = "edge";
        bootLoader = "none";
      };
    };
    channels = {
      prod = {
        rolloutPolicy = "rebooting";
        freshnessWindow = 1440;
      };
      lab = {
        rolloutPolicy = "second-wave";
        freshnessWindow = 1440;
      };
      edge = {
        rolloutPolicy = "never";
        freshnessWindow = 1440;
      };
    };
    rolloutPolicies = {
      rebooting = {
        reboot = {
          allowed = true;
          bootTimeoutMinutes = 20;
          kexec = true;
        };
        waves = [
          {
            name = "canary";
            selector.tags = [ "canary" ];
            soakMinutes = 30;
            reboot = false;
          }
          {
            selector.all = true;
            reboot = null;
          }
        ];
      };
      second-wave = {
        reboot = {
          allowed = false;
          bootTimeoutMinutes = 1440;
          kexec = false;
        };
        waves = [
          { selector.hosts = [ "lab-01" ]; }
          {
            selector.all = true;
            reboot = true;
          }
        ];
      };
      never = {
        strategy = "all-at-once";
        reboot = null;
      };
    };
  };
  warnings = [
    "host \"ct-02\" has no configuration, so CI builds no closure for it; it is not part of any rollout"
  ];
}
