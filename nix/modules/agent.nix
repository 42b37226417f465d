# services.nixfleet-agent: the nixfleet agent on a NixOS host
# (rfcs/0008-agent.md; options in rfcs/0010-nix-integration.md §3).
#
# The flake's nixosModules.agent imports this file and sets `package`;
# imported directly, set services.nixfleet-agent.package yourself.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib)
    mkEnableOption
    mkIf
    mkOption
    types
    ;
  common = import ./common.nix { inherit lib; };
  cfg = config.services.nixfleet-agent;
  settingsFormat = pkgs.formats.toml { };

  stateDir = common.agentStateDir;
  defaultHostKey = "/etc/ssh/ssh_host_ed25519_key";
  opt = path: [
    "services"
    "nixfleet-agent"
  ]
  ++ path;

  nullable =
    type: description:
    mkOption {
      type = types.nullOr type;
      default = null;
      inherit description;
    };

  # `nixfleet-agent run --config FILE`: every setting is in the file.
  configFile = settingsFormat.generate "nixfleet-agent.toml" (common.daemonSettings.nixfleet-agent pkgs cfg);
  metricsFile = cfg.settings.metrics-file;

  probeType = types.submodule {
    options = {
      name = mkOption {
        type = types.strMatching "[A-Za-z0-9._-]+";
        description = "The probe's name in check-ins and reports; unique on the host.";
      };
      type = mkOption {
        type = types.enum [
          "http"
          "tcp"
          "exec"
        ];
        description = "`http`: GET `url`; `tcp`: connect to `address`; `exec`: run `command`, passing on exit status 0.";
      };
      url = nullable types.str "For `http`: the URL to GET.";
      expectStatus = nullable types.ints.positive "For `http`: the status that passes (default: any 2xx).";
      address = nullable types.str "For `tcp`: the `host:port` to connect to.";
      command = nullable (types.listOf types.str) "For `exec`: the program and its arguments.";
      interval = nullable common.duration "How often the probe runs (default 30s, at least 1s).";
      timeout = nullable common.duration "How long one run may take (default 5s).";
    };
  };

in
{
  # The options that became settings (rfcs/0010 §3).
  imports = [
    (lib.mkRenamedOptionModule (opt [ "controlPlane" "url" ]) (opt [ "settings" "cp" ]))
    (lib.mkRenamedOptionModule (opt [ "controlPlane" "caFile" ]) (opt [ "settings" "cp-ca" ]))
    (lib.mkRenamedOptionModule (opt [ "hostname" ]) (opt [ "settings" "hostname" ]))
    (lib.mkRenamedOptionModule (opt [ "hostKeyFile" ]) (opt [ "settings" "host-key" ]))
    (lib.mkRenamedOptionModule (opt [ "substituters" ]) (opt [ "settings" "substituter" ]))
    (lib.mkRenamedOptionModule (opt [ "checkinWait" ]) (opt [ "settings" "wait" ]))
    (lib.mkRenamedOptionModule (opt [ "quarantine" ]) (opt [ "settings" "quarantine" ]))
    (lib.mkRenamedOptionModule (opt [ "metricsFile" ]) (opt [ "settings" "metrics-file" ]))
    (lib.mkRenamedOptionModule (opt [ "logLevel" ]) (opt [ "settings" "log-level" ]))
    (lib.mkRenamedOptionModule (opt [ "logFormat" ]) (opt [ "settings" "log-format" ]))
    (lib.mkRemovedOptionModule (opt [ "extraArgs" ]) "Set the flags of `nixfleet-agent run` as keys of services.nixfleet-agent.settings instead (`--quarantine 2h` is `settings.quarantine = \"2h\"`).")
  ];

  options.services.nixfleet-agent = {
    enable = mkEnableOption "the nixfleet agent, which rolls this host forward to the systems CI signed";

    package = mkOption {
      type = types.package;
      description = "The package providing `bin/nixfleet-agent` (the flake's module sets it).";
    };

    settings = mkOption {
      default = { };
      description = ''
        The agent's settings, written to the TOML file of
        `nixfleet-agent run --config`: each key is a flag of the command
        (rfcs/0008 §Command), such as `profile` or `detach`. The keys
        below are typed; any other is passed as it is, and the agent
        refuses a key it does not know. The module sets `state-dir` (the
        unit's StateDirectory), `trust` and `probes` itself; `config` is
        the file.
      '';
      example = lib.literalExpression ''
        {
          cp = "https://fleet.example.org:8443";
          substituter = [ "https://cache.example.org" ];
          quarantine = "2h";
        }
      '';
      type = types.submodule {
        freeformType = settingsFormat.type;
        options = {
          cp = mkOption {
            type = types.str;
            example = "https://fleet.example.org:8443";
            description = "The control plane's URL. The agent authenticates with mutual TLS, its client key being the host key.";
          };
          cp-ca = mkOption {
            type = types.nullOr types.str;
            default = null;
            example = "/etc/nixfleet/cp-ca.pem";
            description = "PEM file of the CA that signs the control plane's certificate; null trusts the system roots.";
          };
          hostname = mkOption {
            type = types.str;
            default = config.networking.hostName;
            defaultText = lib.literalExpression "config.networking.hostName";
            description = ''
              This host's name in the fleet: its key under `hosts` in mkFleet.
              It must not be empty (an empty networking.hostName leaves the name
              to DHCP; set this then), and a warning says when it is `nixos`,
              networking.hostName's default, which every host that sets no name
              shares.
            '';
          };
          host-key = mkOption {
            type = types.str;
            default = defaultHostKey;
            description = ''
              The host's SSH ed25519 private key: the agent's mutual-TLS identity
              and the key that signs its reports. The control plane admits the
              host only if the public half is the `pubkey` CI signed for it
              (mkFleet's `hosts.<name>.pubkey`). The default is the key OpenSSH
              generates.
            '';
          };
          substituter = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [ "https://cache.example.org" ];
            description = ''
              Binary caches closures are realised from. Nix checks every path
              against `trust.cacheKeys` (`require-sigs`).
            '';
          };
          wait = mkOption {
            type = common.duration;
            default = "30s";
            description = "How long a check-in long-polls for a new target (at most 60s).";
          };
          quarantine = nullable common.duration "How long a closure that failed here is not tried again (default: the agent's).";
          boot-loader = mkOption {
            type = types.enum [ "systemd-boot" "grub" "none" "auto" ];
            default =
              let
                enabled = loader: config.boot.loader.${loader}.enable or false;
              in
              if enabled "systemd-boot" then "systemd-boot"
              else if enabled "grub" then "grub"
              else "none";
            defaultText = lib.literalExpression ''"systemd-boot", "grub" or "none", as boot.loader enables them'';
            description = ''
              The boot loader the agent boots once into a staged generation
              with, when the control plane orders a reboot (rfcs/0008
              §Reboots): systemd-boot (`bootctl set-oneshot`), grub
              (`grub-reboot`), none (it refuses reboot orders, which fail the
              host), or auto (detected at start).
            '';
          };
          metrics-file = mkOption {
            type = types.nullOr (types.strMatching "/.*\\.prom");
            default = null;
            example = "/var/lib/prometheus-node-exporter-text-files/nixfleet-agent.prom";
            description = ''
              A node-exporter textfile (an absolute path ending in `.prom`) the
              agent rewrites, atomically and world-readable, after each
              check-in and activation outcome: its `nixfleet_agent_*` series
              (docs/agent.md, Metrics). Its directory is writable in the
              unit's sandbox (`ReadWritePaths`). Put it in the directory of
              node-exporter's textfile collector to publish them:
              `services.prometheus.exporters.node` with `enabledCollectors = [
              "textfile" ]` and `extraFlags = [
              "--collector.textfile.directory=/var/lib/prometheus-node-exporter-text-files" ]`,
              the directory existing (`systemd.tmpfiles.rules = [ "d
              /var/lib/prometheus-node-exporter-text-files 0755 root root -" ]`).
              null writes none.
            '';
          };
          log-level = common.logLevel;
          log-format = common.logFormat;
        };
      };
    };

    failedUnits = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = "Whether failed systemd units count against the host's health.";
      };
      ignore = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "nixfleet-switch-*" ];
        description = "Glob patterns of units whose failure is ignored.";
      };
      command = nullable (types.listOf types.str) "The command listing failed units (default: `systemctl --failed --plain --no-legend --no-pager`).";
      interval = nullable common.duration "How often failed units are listed (default 30s).";
      timeout = nullable common.duration "How long listing them may take (default 5s).";
    };

    probes = mkOption {
      type = types.listOf probeType;
      default = [ ];
      example = lib.literalExpression ''
        [ { name = "web"; type = "http"; url = "http://127.0.0.1/healthz"; } ]
      '';
      description = "Health probes, reported on every check-in; a failing probe fails the host's soak.";
    };

    probesFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = "A probes file managed outside Nix; when set, `failedUnits` and `probes` are ignored.";
    };

    restartSec = mkOption {
      type = common.duration;
      default = "5s";
      description = "How long systemd waits before restarting the agent after it exits.";
    };

  }
  // common.trustOptions;

  config = mkIf cfg.enable {
    assertions =
      common.trustAssertions "nixfleet-agent" cfg
      ++ common.settingsAssertions "nixfleet-agent" cfg.settings {
        config = "it is the file the module writes from settings";
        state-dir = "the module sets it to the unit's StateDirectory, ${stateDir}";
        trust = "set trust or trustFile";
        probes = "set probes and failedUnits, or probesFile";
      }
      ++ [
        {
          assertion = cfg.settings.hostname != "";
          message = "services.nixfleet-agent: hostname is empty; set networking.hostName, or services.nixfleet-agent.settings.hostname, to this host's name in the fleet.";
        }
        {
          assertion = (cfg.settings.detach or null) != "";
          message = "services.nixfleet-agent: settings.detach is empty, which would run the switch inside the agent's sandbox, where it cannot activate a system; leave detach unset (systemd-run).";
        }
      ];

    warnings =
      lib.optional (cfg.settings.hostname == "nixos")
        "services.nixfleet-agent: hostname is \"nixos\", networking.hostName's default, which every host that sets no name shares; set networking.hostName, or services.nixfleet-agent.settings.hostname, to this host's name in the fleet."
      ++ lib.optional (
        cfg.settings.host-key == defaultHostKey && !config.services.openssh.enable
      ) "services.nixfleet-agent: services.openssh is disabled, so nothing generates ${defaultHostKey}; create it, or point settings.host-key at the host's key.";

    systemd.services.nixfleet-agent = {
      description = "nixfleet agent";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      # nix-store and nix-env realise closures and set the system profile;
      # systemd-run detaches the switch (units get systemd on PATH anyway).
      path = [ config.nix.package ];
      # Restarted after a switch rather than stopped before it: the agent
      # runs the switch in its own unit and resumes from its state
      # directory, so a change to this unit never stops a rollout.
      stopIfChanged = false;
      serviceConfig = {
        ExecStart = common.execLine [
          "${cfg.package}/bin/nixfleet-agent"
          "run"
          "--config"
          "${configFile}"
        ];
        Restart = "always";
        RestartSec = cfg.restartSec;
        StateDirectory = "nixfleet-agent";
        StateDirectoryMode = "0700";

        # The sandbox (rfcs/0008 §Sandbox). It holds what the agent runs
        # itself: nix-store and nix-env as root on the local store (which
        # write /nix, and remount the read-only /nix/store writable in a
        # mount namespace of their own), `switch-to-configuration boot`
        # (the boot loader: /boot, the ESP, block devices, EFI variables),
        # systemctl and systemd-run (D-Bus, systemd's socket), the probes'
        # commands. A live switch runs in a unit of its own (systemd-run)
        # and is not confined by it.
        #
        # /usr and /etc read-only; /nix, /var and /run stay writable.
        ProtectSystem = "full";
        # The boot loader's files (ProtectSystem makes both read-only),
        # and the metrics file's directory; "-": one that does not exist is
        # left out.
        ReadWritePaths = map (p: "-${common.unitPath p}") (
          [
            "/boot"
            "/efi"
          ]
          ++ lib.optional (metricsFile != null) (dirOf metricsFile)
        );
        # /root readable (ssh substituters read root's keys); Nix's cache
        # of binary-cache lookups moves out of ~/.cache.
        ProtectHome = "read-only";
        CacheDirectory = "nixfleet-agent";
        CacheDirectoryMode = "0700";
        Environment = [ "XDG_CACHE_HOME=/var/cache/nixfleet-agent" ];
        PrivateTmp = true;
        # Not PrivateDevices, ProtectKernelTunables or a tight capability
        # bound: the boot loader's installer writes block devices and EFI
        # variables (/sys/firmware/efi/efivars) as root. Only what none of
        # the agent's commands use is dropped.
        # One line: NixOS writes a list as one assignment per element, and
        # a second "~" line would not drop more.
        CapabilityBoundingSet =
          "~"
          + builtins.concatStringsSep " " [
            "CAP_BLOCK_SUSPEND"
            "CAP_BPF"
            "CAP_LEASE"
            "CAP_MAC_ADMIN"
            "CAP_MAC_OVERRIDE"
            "CAP_SYS_BOOT"
            "CAP_SYS_PACCT"
            "CAP_SYS_TTY_CONFIG"
            "CAP_WAKE_ALARM"
          ];
        ProtectKernelModules = true;
        ProtectKernelLogs = true;
        ProtectControlGroups = true;
        ProtectClock = true;
        ProtectHostname = true;
        ProtectProc = "invisible";
        # HTTP(S) to the control plane and the caches, Unix sockets to
        # systemd and D-Bus, netlink for the resolver.
        RestrictAddressFamilies = [
          "AF_UNIX"
          "AF_INET"
          "AF_INET6"
          "AF_NETLINK"
        ];
        # Nix remounts /nix/store writable in a mount namespace (unshare,
        # mount): that namespace and @mount, nothing more.
        RestrictNamespaces = "mnt";
        SystemCallFilter = [
          "@system-service"
          "@mount"
        ];
        SystemCallErrorNumber = "EPERM";
        SystemCallArchitectures = "native";
        RestrictRealtime = true;
        RestrictSUIDSGID = true;
        LockPersonality = true;
        MemoryDenyWriteExecute = true;
        # Root already holds every capability a setuid wrapper would give.
        NoNewPrivileges = true;
        # As an administrator's: Nix and the boot loader write files other
        # programs read; the state directory is 0700, and the metrics file
        # is made 0644 on every write.
        UMask = "0022";
      };
    };
  };
}
