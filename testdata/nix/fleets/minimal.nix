# The smallest useful fleet: one host, one channel, one wave.
{ system }:
{
  input = {
    hosts.web-01 = {
      system = "x86_64-linux";
      configuration = system "web-01";
      channel = "stable";
      pubkey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOG05ZB5CE/OQnGpVhTmUsL0uCOxInm+oVr+q2u3wtrS";
    };
    channels.stable = {
      rolloutPolicy = "all-at-once";
      freshnessWindow = 180;
    };
    rolloutPolicies.all-at-once.waves = [ { selector.all = true; } ];
  };
}
