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

  # `nixfleet-agent run --state-dir` must be the unit's StateDirectory.
  stateDir = "/var/lib/nixfleet-agent";
  defaultHostKey = "/etc/ssh/ssh_host_ed25519_key";

  nullable =
    type: description:
    mkOption {
      type = types.nullOr type;
      default = null;
      inherit description;
    };

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

  probesFile =
    if cfg.probesFile != null then
      cfg.probesFile
    else
      pkgs.writeText "nixfleet-agent-probes.json" (common.probesJSON cfg);

  args = [
    "--cp"
    cfg.controlPlane.url
    "--hostname"
    cfg.hostname
    "--host-key"
    cfg.hostKeyFile
    "--trust"
    "${common.trustPath pkgs "nixfleet-agent" cfg}"
    "--state-dir"
    stateDir
    "--probes"
    "${probesFile}"
    "--wait"
    cfg.checkinWait
    "--log-level"
    cfg.logLevel
    "--log-format"
    cfg.logFormat
  ]
  ++ lib.optionals (cfg.controlPlane.caFile != null) [
    "--cp-ca"
    cfg.controlPlane.caFile
  ]
  ++ builtins.concatMap (s: [
    "--substituter"
    s
  ]) cfg.substituters
  ++ lib.optionals (cfg.quarantine != null) [
    "--quarantine"
    cfg.quarantine
  ]
  ++ lib.optionals (cfg.metricsFile != null) [
    "--metrics-file"
    cfg.metricsFile
  ]
  ++ cfg.extraArgs;
in
{
  options.services.nixfleet-agent = {
    enable = mkEnableOption "the nixfleet agent, which rolls this host forward to the systems CI signed";

    package = mkOption {
      type = types.package;
      description = "The package providing `bin/nixfleet-agent` (the flake's module sets it).";
    };

    controlPlane = {
      url = mkOption {
        type = types.str;
        example = "https://fleet.example.org:8443";
        description = "The control plane's URL. The agent authenticates with mutual TLS, its client key being the host key.";
      };
      caFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/etc/nixfleet/cp-ca.pem";
        description = "PEM file of the CA that signs the control plane's certificate; null trusts the system roots.";
      };
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

    hostKeyFile = mkOption {
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

    substituters = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "https://cache.example.org" ];
      description = ''
        Binary caches closures are realised from. Nix checks every path
        against `trust.cacheKeys` (`require-sigs`).
      '';
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

    checkinWait = mkOption {
      type = common.duration;
      default = "30s";
      description = "How long a check-in long-polls for a new target (at most 60s).";
    };

    quarantine = nullable common.duration "How long a closure that failed here is not tried again (default: the agent's).";

    metricsFile = mkOption {
      type = types.nullOr (types.strMatching "/.*\\.prom");
      default = null;
      example = "/var/lib/prometheus-node-exporter-text-files/nixfleet-agent.prom";
      description = ''
        A node-exporter textfile (an absolute path ending in `.prom`) the
        agent rewrites, atomically, after each check-in and activation
        outcome: its `nixfleet_agent_*` series (docs/agent.md, Metrics).
        Put it in the directory of node-exporter's textfile collector to
        publish them: `services.prometheus.exporters.node` with
        `enabledCollectors = [ "textfile" ]` and `extraFlags = [
        "--collector.textfile.directory=/var/lib/prometheus-node-exporter-text-files" ]`,
        the directory existing (`systemd.tmpfiles.rules = [ "d
        /var/lib/prometheus-node-exporter-text-files 0755 root root -" ]`).
        null writes none.
      '';
    };

    logLevel = common.logLevel;
    logFormat = common.logFormat;

    restartSec = mkOption {
      type = common.duration;
      default = "5s";
      description = "How long systemd waits before restarting the agent after it exits.";
    };

    extraArgs = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [
        "--detach"
        ""
      ];
      description = "More arguments for `nixfleet-agent run`.";
    };
  }
  // common.trustOptions;

  config = mkIf cfg.enable {
    assertions = common.trustAssertions "nixfleet-agent" cfg ++ [
      {
        assertion = cfg.hostname != "";
        message = "services.nixfleet-agent: hostname is empty; set networking.hostName, or services.nixfleet-agent.hostname, to this host's name in the fleet.";
      }
    ];

    warnings =
      lib.optional (cfg.hostname == "nixos")
        "services.nixfleet-agent: hostname is \"nixos\", networking.hostName's default, which every host that sets no name shares; set networking.hostName, or services.nixfleet-agent.hostname, to this host's name in the fleet."
      ++ lib.optional (
        cfg.hostKeyFile == defaultHostKey && !config.services.openssh.enable
      ) "services.nixfleet-agent: services.openssh is disabled, so nothing generates ${defaultHostKey}; create it, or point hostKeyFile at the host's key.";

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
        ExecStart = common.execLine ([
          "${cfg.package}/bin/nixfleet-agent"
          "run"
        ]
        ++ args);
        Restart = "always";
        RestartSec = cfg.restartSec;
        StateDirectory = "nixfleet-agent";
        StateDirectoryMode = "0700";
      };
    };
  };
}
