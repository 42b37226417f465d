# services.nixfleet-control-plane: the nixfleet control plane
# (rfcs/0006-control-plane.md; options in rfcs/0010-nix-integration.md §3).
#
# The flake's nixosModules.control-plane imports this file and sets
# `package`; imported directly, set
# services.nixfleet-control-plane.package yourself.
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
  cfg = config.services.nixfleet-control-plane;
  settingsFormat = pkgs.formats.toml { };

  user = common.cpUser;
  # The state-dir of the --config file must be the unit's StateDirectory.
  stateDir = common.cpStateDir;
  opt = path: [
    "services"
    "nixfleet-control-plane"
  ]
  ++ path;

  # The unit after which that database and its owner exist. nixpkgs 25.11
  # runs ensureDatabases and ensureUsers in postgresql-setup.service, which
  # postgresql.target waits for (the unit nixpkgs tells dependants to
  # use); older nixpkgs ran them in postgresql.service's postStart. The
  # configuration says which nixpkgs this is: the postgresql module
  # defines those units when services.postgresql.enable is set.
  postgresqlUnit =
    if config.systemd.targets ? postgresql then
      "postgresql.target"
    else if config.systemd.services ? postgresql-setup then
      "postgresql-setup.service"
    else
      "postgresql.service";

  # A local repository is opened in place and only read; a URL (or an
  # scp-like user@host:path) is mirrored into the state directory. The
  # same test as isRemote in controlplane/source.go.
  repoIsRemote =
    let
      r = cfg.repository;
      has = re: builtins.match re r != null;
    in
    has ".*://.*" || (has ".*@.*" && has ".*:.*" && builtins.substring 0 1 r != "/");
  inherit (common) unitPath;

  port =
    let
      m = builtins.match ".*:([0-9]+)" cfg.settings.listen;
    in
    if m == null then null else builtins.fromJSON (builtins.head m);

  # The directory Grafana's file provider reads: the dashboard alone.
  dashboards = builtins.path {
    name = "nixfleet-dashboards";
    path = ../../monitoring;
    filter = path: _: baseNameOf path == "dashboard.json";
  };

  # Binding a port under 1024 takes CAP_NET_BIND_SERVICE.
  lowPort = port != null && port < 1024;

  # Secrets reach the unprivileged service as systemd credentials, so the
  # files may stay readable by root alone. Their paths are the only flags
  # (%d, the credentials directory, is expanded by systemd on the command
  # line, not in the file); everything else is in the --config file.
  credential = name: { raw = "%d/${name}"; };
  withURL = cfg.settings.prometheus-url != null;
  credentials =
    lib.optional (cfg.tls.keyFile != null) {
      flag = "tls-key";
      name = "tls-key";
      file = cfg.tls.keyFile;
    }
    ++ lib.optional (cfg.webhookSecretFile != null) {
      flag = "webhook-secret-file";
      name = "webhook-secret";
      file = cfg.webhookSecretFile;
    }
    ++ lib.optional (withURL && cfg.prometheus.bearerTokenFile != null) {
      flag = "prometheus-bearer-token-file";
      name = "prometheus-token";
      file = cfg.prometheus.bearerTokenFile;
    }
    ++ lib.optional (withURL && cfg.prometheus.basicAuth.passwordFile != null) {
      flag = "prometheus-basic-auth-password-file";
      name = "prometheus-password";
      file = cfg.prometheus.basicAuth.passwordFile;
    };

  # The notification webhooks, as the --config file's tables; each
  # secretFile is the credential notify-<name>.
  webhooks = cfg.notifications.webhooks;
  webhookNames = map (w: w.name) webhooks;

  configFile = settingsFormat.generate "nixfleet-cp.toml" (common.daemonSettings.nixfleet-control-plane pkgs cfg);

  nullable =
    type: example: description:
    mkOption {
      type = types.nullOr type;
      default = null;
      inherit example description;
    };

  operatorType = types.submodule {
    options = {
      name = mkOption {
        type = types.str;
        description = "The operator's name, recorded with every intent they send.";
      };
      key = mkOption {
        type = types.either types.str common.keyType;
        example = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOG05ZB5CE/OQnGpVhTmUsL0uCOxInm+oVr+q2u3wtrS";
        description = ''
          The operator's ed25519 public key: an OpenSSH line, or
          `{ algorithm = "ed25519"; public = "<base64>"; }` as
          `nixfleet keygen` writes it.
        '';
      };
      role = mkOption {
        type = types.enum [
          "viewer"
          "operator"
          "approver"
        ];
        description = "`viewer` reads; `operator` also pauses, resumes, cancels and rolls back; `approver` also approves waves and breaks freezes (change control).";
      };
    };
  };

  webhookType = types.submodule {
    options = {
      name = mkOption {
        type = types.strMatching "[a-z0-9][a-z0-9_-]{0,62}";
        example = "ops";
        description = "The sink's name: its place in the journal (kept in the store), its metrics' label, and `X-Nixfleet-Delivery` (`<name>/<event id>`).";
      };
      url = mkOption {
        type = types.str;
        example = "https://hooks.example.org/nixfleet";
        description = "Where each event is POSTed (http or https). For `alertmanager`, Alertmanager's `/api/v2/alerts`.";
      };
      format = mkOption {
        type = types.enum [
          "json"
          "slack"
          "alertmanager"
        ];
        default = "json";
        description = "`json` (the event and a summary line), `slack` (`{\"text\": …}`, Slack and Mattermost incoming webhooks) or `alertmanager` (Alertmanager's API v2).";
      };
      events = mkOption {
        type = types.listOf (types.enum common.notificationCategories);
        default = [ ];
        example = [
          "halted"
          "reverted"
          "release_refused"
        ];
        description = "The categories of events the sink is sent; empty: every category.";
      };
      channels = mkOption {
        type = types.listOf types.str;
        default = [ ];
        description = "The channels whose events the sink is sent; empty: every channel (events of no channel are always sent).";
      };
      secretFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "A file holding the key of `X-Nixfleet-Signature` (HMAC-SHA256 of the body), handed over as a systemd credential; null: POSTs are not signed.";
      };
      timeout = mkOption {
        type = types.nullOr common.duration;
        default = null;
        example = "10s";
        description = "How long one POST may take, answer included (default 10s, at most 1m).";
      };
      minBackoff = mkOption {
        type = types.nullOr common.duration;
        default = null;
        example = "1s";
        description = "The wait before a failed event is tried again, doubled after each further failure (default 1s).";
      };
      maxBackoff = mkOption {
        type = types.nullOr common.duration;
        default = null;
        example = "5m";
        description = "The longest wait between two tries (default 5m).";
      };
      ca = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "A CA bundle (PEM) to trust for an https sink, besides the system's.";
      };
    };
  };
in
{
  # The options that became settings (rfcs/0010 §3).
  imports = [
    (lib.mkRenamedOptionModule (opt [ "listen" ]) (opt [ "settings" "listen" ]))
    (lib.mkRenamedOptionModule (opt [ "database" "url" ]) (opt [ "settings" "db" ]))
    (lib.mkRenamedOptionModule (opt [ "replicaId" ]) (opt [ "settings" "replica-id" ]))
    (lib.mkRenamedOptionModule (opt [ "tickInterval" ]) (opt [ "settings" "tick-interval" ]))
    (lib.mkRenamedOptionModule (opt [ "pollInterval" ]) (opt [ "settings" "poll-interval" ]))
    (lib.mkRenamedOptionModule (opt [ "watchRefs" ]) (opt [ "settings" "watch-ref" ]))
    (lib.mkRenamedOptionModule (opt [ "retention" ]) (opt [ "settings" "retention" ]))
    (lib.mkRenamedOptionModule (opt [ "prometheus" "url" ]) (opt [ "settings" "prometheus-url" ]))
    (lib.mkRenamedOptionModule (opt [ "prometheus" "caFile" ]) (opt [ "settings" "prometheus-ca" ]))
    (lib.mkRenamedOptionModule (opt [ "prometheus" "basicAuth" "user" ]) (opt [ "settings" "prometheus-basic-auth-user" ]))
    (lib.mkRenamedOptionModule (opt [ "prometheus" "proxyUrl" ]) (opt [ "settings" "prometheus-proxy-url" ]))
    (lib.mkRenamedOptionModule (opt [ "prometheus" "timeout" ]) (opt [ "settings" "prometheus-timeout" ]))
    (lib.mkChangedOptionModule (opt [ "prometheus" "headers" ]) (opt [ "settings" "prometheus-header" ]) (
      config:
      lib.mapAttrsToList (name: value: "${name}: ${value}") config.services.nixfleet-control-plane.prometheus.headers
    ))
    (lib.mkRenamedOptionModule (opt [ "logLevel" ]) (opt [ "settings" "log-level" ]))
    (lib.mkRenamedOptionModule (opt [ "logFormat" ]) (opt [ "settings" "log-format" ]))
    (lib.mkRemovedOptionModule (opt [ "extraArgs" ]) "Set the flags of `nixfleet-cp serve` as keys of services.nixfleet-control-plane.settings instead (`--confirm-window 10m` is `settings.confirm-window = \"10m\"`).")
  ];

  options.services.nixfleet-control-plane = {
    enable = mkEnableOption "the nixfleet control plane, which rolls out what CI signed as channel refs move";

    package = mkOption {
      type = types.package;
      description = "The package providing `bin/nixfleet-cp` (the flake's module sets it).";
    };

    settings = mkOption {
      default = { };
      description = ''
        The control plane's settings, written to the TOML file of
        `nixfleet-cp serve --config`: each key is a flag of the command
        (rfcs/0006 §Processes and configuration), such as
        `confirm-window` or `partial-visibility-pct`, and
        `[[notifications.webhook]]` tables may be given here when
        `notifications.webhooks` is empty. The keys below are typed; any
        other is passed as it is, and the control plane refuses a key it
        does not know. The module sets `state-dir` (the unit's
        StateDirectory), `repo`, `trust`, `operators`, `tls-cert` and, with
        `postgresql.enable`, `db` from its other options; the secrets'
        flags (`tls-key`, `webhook-secret-file`,
        `prometheus-bearer-token-file`,
        `prometheus-basic-auth-password-file`) are systemd credentials on
        the command line. The file is in the Nix store: no secrets here.
      '';
      example = lib.literalExpression ''
        {
          listen = "0.0.0.0:8443";
          confirm-window = "10m";
          prometheus-url = "https://prometheus.example.org";
          prometheus-header = [ "X-Scope-OrgID: team-a" ];
        }
      '';
      type = types.submodule {
        freeformType = settingsFormat.type;
        options = {
          listen = mkOption {
            type = types.str;
            default = "127.0.0.1:8443";
            example = "0.0.0.0:8443";
            description = "The `host:port` the API (agents and operators, HTTPS) listens on.";
          };
          db =
            nullable types.str "postgres://nixfleet@db.example.org/nixfleet"
              ''
                The store: `postgres://…` (several replicas may share one database)
                or `sqlite:///path`. Null, without `postgresql.enable`, is the
                embedded SQLite database in ${stateDir}. Keep passwords out of the
                Nix store: put `NIXFLEET_CP_DB=…` in `environmentFile` instead
                (the environment wins over the file).
              '';
          insecure-dev = mkOption {
            type = types.bool;
            default = false;
            description = "Plain HTTP without authentication, on loopback only: for tests and demonstrations, never a fleet.";
          };
          replica-id = nullable types.str "cp-1" "This replica's name in the tick lease (default: the hostname and a random suffix).";
          tick-interval = nullable common.duration "30s" "The periodic reconcile tick (default 30s).";
          poll-interval = nullable common.duration "5s" "How often the channel refs are polled (default 5s).";
          watch-ref =
            nullable (types.listOf types.str) [ "refs/heads/main" ]
              ''
                The refs CI commits its signed releases to: each new commit there is
                verified ahead of its promotion, so that moving a channel's ref to it
                costs only the time checks (default every branch, refs/heads/*; the
                empty list: none).
              '';
          retention = nullable common.duration "720h" "How long events and finished rollouts are kept, and hosts that left the fleet are remembered while unheard (default 720h).";
          prometheus-url =
            nullable types.str "https://prometheus.example.org"
              ''
                The Prometheus that the rollout policies' canary analyses query
                (`healthGate.analysis`, rfcs/0006 §Canary analysis). Null: a
                policy with analyses measures nothing, and its rollouts halt
                with `analysis_inconclusive`. The credentials of
                `prometheus.bearerTokenFile` and
                `prometheus.basicAuth.passwordFile` are passed only with it.
              '';
          prometheus-ca = nullable types.str "/etc/ssl/prometheus-ca.pem" "A CA bundle (PEM) to trust for an https Prometheus, instead of the system's.";
          prometheus-basic-auth-user = nullable types.str "nixfleet" "A user for HTTP basic auth to Prometheus (its password: `prometheus.basicAuth.passwordFile`); not with `prometheus.bearerTokenFile`.";
          prometheus-header = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [ "X-Scope-OrgID: team-a" ];
            description = ''
              Headers sent with every query (`Name: value`), such as the tenant
              of a Mimir, Cortex or Thanos gateway. They are in the Nix store:
              no secrets (and no `Authorization`; use the prometheus options).
            '';
          };
          prometheus-proxy-url = nullable types.str "http://proxy.example.org:3128" "An HTTP proxy to reach Prometheus through; null: the service's environment (`HTTPS_PROXY`, `NO_PROXY`).";
          prometheus-timeout = nullable common.duration "10s" "How long one analysis query may take (default 10s).";
          log-level = common.logLevel;
          log-format = common.logFormat;
        };
      };
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Whether to open the port of `settings.listen` in the firewall.";
    };

    monitoring = {
      grafanaDashboard = mkEnableOption "the nixfleet dashboard (`monitoring/dashboard.json`) in this machine's Grafana, through a file provider of `services.grafana.provision`";
      prometheusRules = mkEnableOption "the nixfleet alerting rules (`monitoring/alerts.yml`) in this machine's Prometheus (`services.prometheus.ruleFiles`)";
    };

    repository = mkOption {
      type = types.str;
      example = "/srv/git/fleet.git";
      description = ''
        The fleet repository whose `refs/heads/channels/<channel>` refs are
        rolled out: an absolute local path (bare repository or worktree,
        readable by the `${user}` user) or a URL, mirrored into the state
        directory. A local repository is read in place and never written:
        the unit, whose file system is read-only (`ProtectSystem=strict`),
        lists it in `ReadOnlyPaths` and waits for its mount
        (`RequiresMountsFor`). It cannot be under /tmp (`PrivateTmp`).
      '';
    };

    postgresql.enable = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Whether to run PostgreSQL on this machine (services.postgresql) with
        a `${user}` database owned by the service's user, and use it over
        the local socket with peer authentication. The unit requires, and
        starts after, the unit that has created that database:
        `postgresql.target` where nixpkgs defines it, else
        `postgresql-setup.service`, else (nixpkgs before 25.11)
        `postgresql.service`.
      '';
    };

    operators = mkOption {
      type = types.listOf operatorType;
      default = [ ];
      description = "The operators, written to the operators file; empty leaves operator endpoints closed.";
    };

    operatorsFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = "An operators file managed outside Nix; excludes `operators`.";
    };

    tls = {
      certFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/acme/fleet.example.org/fullchain.pem";
        description = "The server certificate (PEM). Required with `keyFile`, unless `settings.insecure-dev`.";
      };
      keyFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "/var/lib/acme/fleet.example.org/key.pem";
        description = "The server's private key (PEM), handed to the service as a systemd credential; keep it out of the Nix store.";
      };
    };

    webhookSecretFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = "A file holding the secret of `POST /v1/hooks/git` (HMAC-SHA256), handed over as a systemd credential; null disables the webhook.";
    };

    maxOpenFiles = mkOption {
      type = types.ints.positive;
      default = 1048576;
      example = 262144;
      description = ''
        The service's open file limit (LimitNOFILE). Every connected agent
        holds a connection, so it must be above the fleet size with room
        for the database pool and the repository (the default, the
        kernel's usual fs.nr_open, is above a fleet of 100,000 hosts).
      '';
    };

    listenBacklog = mkOption {
      type = types.ints.between 128 65535;
      default = 65535;
      example = 4096;
      description = ''
        The kernel's accept backlog for the service's port
        (net.core.somaxconn, and net.ipv4.tcp_max_syn_backlog; set with
        mkDefault, so that a host's own values win). After a restart every
        agent reconnects at once; connections past the backlog are dropped
        and retried by the agents' TCP 1 and 3 s later. The kernel's
        default, 4096, is well below a fleet of 100,000 hosts.
      '';
    };

    prometheus = {
      bearerTokenFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "A file holding a bearer token for the Prometheus of `settings.prometheus-url`, handed over as the systemd credential `prometheus-token`.";
      };
      basicAuth.passwordFile = mkOption {
        type = types.nullOr types.str;
        default = null;
        description = "A file holding the basic auth password of `settings.prometheus-basic-auth-user`, handed over as the systemd credential `prometheus-password`.";
      };
    };

    notifications.webhooks = mkOption {
      type = types.listOf webhookType;
      default = [ ];
      description = ''
        Webhooks the journal is sent to: a rollout opened, a wave promoted,
        a rollout halted, reverted, converged or failed, an approval
        needed, partial visibility, a release refused, an analysis that
        ended (rfcs/0006 §Notifications). They are the
        `[[notifications.webhook]]` tables of the --config file; each
        `secretFile` is handed over as the credential `notify-<name>`.
      '';
    };

    environmentFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "/run/secrets/nixfleet-cp.env";
      description = "A systemd EnvironmentFile, for settings that must stay out of the Nix store (`NIXFLEET_CP_DB=postgres://…`); the environment wins over the --config file.";
    };
  }
  // common.trustOptions;

  config = mkIf cfg.enable {
    assertions =
      common.trustAssertions "nixfleet-control-plane" cfg
      ++ common.settingsAssertions "nixfleet-control-plane" cfg.settings {
        config = "it is the file the module writes from settings";
        state-dir = "the module sets it to the unit's StateDirectory, ${stateDir}";
        repo = "set repository";
        trust = "set trust or trustFile";
        operators = "set operators or operatorsFile";
        tls-cert = "set tls.certFile";
        tls-key = "set tls.keyFile (a systemd credential)";
        webhook-secret-file = "set webhookSecretFile (a systemd credential)";
        prometheus-bearer-token-file = "set prometheus.bearerTokenFile (a systemd credential)";
        prometheus-basic-auth-password-file = "set prometheus.basicAuth.passwordFile (a systemd credential)";
      }
      ++ [
        {
          assertion = (cfg.tls.certFile == null) == (cfg.tls.keyFile == null);
          message = "services.nixfleet-control-plane: set both tls.certFile and tls.keyFile, or neither.";
        }
        {
          assertion = cfg.tls.certFile != null || cfg.settings.insecure-dev;
          message = "services.nixfleet-control-plane: set tls.certFile and tls.keyFile; the control plane serves HTTPS only (settings.insecure-dev is for tests on loopback).";
        }
        {
          assertion = !(cfg.postgresql.enable && cfg.settings.db != null);
          message = "services.nixfleet-control-plane: postgresql.enable sets the database; unset settings.db.";
        }
        {
          assertion = cfg.operators == [ ] || cfg.operatorsFile == null;
          message = "services.nixfleet-control-plane: set operators or operatorsFile, not both.";
        }
        {
          assertion = repoIsRemote || builtins.substring 0 1 cfg.repository == "/";
          message = "services.nixfleet-control-plane: repository must be a URL or an absolute path, not ${builtins.toJSON cfg.repository}.";
        }
        {
          assertion = port != null;
          message = "services.nixfleet-control-plane: settings.listen must be host:port, not ${builtins.toJSON cfg.settings.listen}.";
        }
        {
          assertion = builtins.all (n: builtins.length (builtins.filter (m: m == n) webhookNames) == 1) webhookNames;
          message = "services.nixfleet-control-plane: notifications.webhooks need names of their own.";
        }
        {
          assertion = webhooks == [ ] || !(cfg.settings ? notifications);
          message = "services.nixfleet-control-plane: set notifications.webhooks or settings.notifications, not both.";
        }
        {
          assertion = cfg.settings.prometheus-basic-auth-user == null || cfg.prometheus.bearerTokenFile == null;
          message = "services.nixfleet-control-plane: set settings.prometheus-basic-auth-user or prometheus.bearerTokenFile, not both.";
        }
        {
          assertion = cfg.prometheus.basicAuth.passwordFile == null || cfg.settings.prometheus-basic-auth-user != null;
          message = "services.nixfleet-control-plane: prometheus.basicAuth.passwordFile needs settings.prometheus-basic-auth-user.";
        }
        {
          assertion =
            !(builtins.any (
              h: builtins.match "[[:space:]]*[Aa][Uu][Tt][Hh][Oo][Rr][Ii][Zz][Aa][Tt][Ii][Oo][Nn][[:space:]]*:.*" h != null
            ) cfg.settings.prometheus-header);
          message = "services.nixfleet-control-plane: settings.prometheus-header cannot set Authorization; use settings.prometheus-basic-auth-user or prometheus.bearerTokenFile.";
        }
      ];

    boot.kernel.sysctl = {
      "net.core.somaxconn" = lib.mkDefault cfg.listenBacklog;
      "net.ipv4.tcp_max_syn_backlog" = lib.mkDefault cfg.listenBacklog;
    };

    users.users.${user} = {
      isSystemUser = true;
      group = user;
      home = stateDir;
      description = "nixfleet control plane";
    };
    users.groups.${user} = { };

    services.postgresql = mkIf cfg.postgresql.enable {
      enable = true;
      ensureDatabases = [ user ];
      ensureUsers = [
        {
          name = user;
          ensureDBOwnership = true;
        }
      ];
    };

    networking.firewall.allowedTCPPorts = lib.optionals (cfg.openFirewall && port != null) [ port ];

    services.grafana.provision.dashboards.settings.providers = mkIf cfg.monitoring.grafanaDashboard [
      {
        name = "nixfleet";
        type = "file";
        options.path = dashboards;
      }
    ];
    services.prometheus.ruleFiles = mkIf cfg.monitoring.prometheusRules [ ../../monitoring/alerts.yml ];

    systemd.services.nixfleet-control-plane = {
      description = "nixfleet control plane";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ] ++ lib.optional cfg.postgresql.enable postgresqlUnit;
      requires = lib.optional cfg.postgresql.enable postgresqlUnit;
      unitConfig.RequiresMountsFor = lib.optional (!repoIsRemote) (unitPath cfg.repository);
      serviceConfig = {
        ExecStart = common.execLine (
          [
            "${cfg.package}/bin/nixfleet-cp"
            "serve"
            "--config"
            "${configFile}"
          ]
          ++ builtins.concatMap (c: [
            "--${c.flag}"
            (credential c.name)
          ]) credentials
        );
        # Ready once the store answers (migrated) and the fleet repository
        # was read once; keep-alives come from the replica's loop, so one
        # that stops reacting is restarted (rfcs/0006 §Processes and configuration).
        Type = "notify";
        NotifyAccess = "main";
        WatchdogSec = "2min";
        # A migration of a large store may run before the replica is ready.
        TimeoutStartSec = "15min";
        User = user;
        Group = user;
        StateDirectory = "nixfleet-cp";
        StateDirectoryMode = "0750";
        UMask = "0077";
        Restart = "on-failure";
        RestartSec = "5s";
        LimitNOFILE = cfg.maxOpenFiles;
        LoadCredential =
          map (c: "${c.name}:${c.file}") credentials
          ++ map (w: "notify-${w.name}:${w.secretFile}") (builtins.filter (w: w.secretFile != null) webhooks);
        EnvironmentFile = lib.optional (cfg.environmentFile != null) cfg.environmentFile;
        AmbientCapabilities = lib.optional lowPort "CAP_NET_BIND_SERVICE";
        CapabilityBoundingSet = if lowPort then [ "CAP_NET_BIND_SERVICE" ] else [ "" ];
        # Its own user namespace has no capability to give to a low port.
        PrivateUsers = !lowPort;
        NoNewPrivileges = true;
        PrivateTmp = true;
        PrivateDevices = true;
        ProtectClock = true;
        ProtectHostname = true;
        ProtectKernelLogs = true;
        ProtectKernelModules = true;
        ProtectProc = "invisible";
        ProcSubset = "pid";
        # TCP for agents, operators, PostgreSQL, git and webhooks; a Unix
        # socket for a local PostgreSQL and the service manager.
        RestrictAddressFamilies = [
          "AF_UNIX"
          "AF_INET"
          "AF_INET6"
        ];
        RestrictNamespaces = true;
        RestrictRealtime = true;
        RemoveIPC = true;
        MemoryDenyWriteExecute = true;
        SystemCallArchitectures = "native";
        SystemCallFilter = [
          "@system-service"
          "~@privileged"
        ];
        SystemCallErrorNumber = "EPERM";
        ProtectSystem = "strict";
        ProtectHome = "read-only";
        # A local repository is read in place and never written, so
        # ProtectSystem=strict suits it (a URL's mirror lives in the state
        # directory); it is named here so that the unit says what it
        # reads. "-": a missing repository is the control plane's error
        # to report, not a failure to set up the unit's namespace.
        ReadOnlyPaths = lib.optional (!repoIsRemote) "-${unitPath cfg.repository}";
        ProtectKernelTunables = true;
        ProtectControlGroups = true;
        RestrictSUIDSGID = true;
        LockPersonality = true;
      };
    };
  };
}
