# What the agent and control-plane modules share: the trust.json options,
# the files the modules write (the JSON files and the settings of the
# --config file), and the quoting of ExecStart and of unit paths.
#
# A function of nixpkgs' lib; the builders use builtins and the lib
# functions the stub has, so the tests (nix/tests/modules) call them on
# the options' values too.
{ lib }:
let
  inherit (lib) mkOption types;

  keyType = types.submodule {
    options = {
      algorithm = mkOption {
        type = types.enum [
          "ed25519"
          "ecdsa-p256"
        ];
        default = "ed25519";
        description = "The key's algorithm. It belongs to the key, never to the artifacts it verifies.";
      };
      public = mkOption {
        type = types.str;
        example = "2Y3nl2cZk8T1m0a8B0yN0x3v6zJj6h3cX8f5oKq7b0Q=";
        description = ''
          Standard base64 of the raw public key (32 bytes for ed25519, the
          64-byte X‖Y point for ecdsa-p256): the `public` member of the
          `PREFIX.pub.json` file `nixfleet keygen` writes.
        '';
      };
    };
  };

  slot =
    description:
    mkOption {
      type = types.nullOr keyType;
      default = null;
      inherit description;
    };

  keyJSON =
    k:
    if k == null then
      null
    else
      {
        inherit (k) algorithm public;
      };
  nonNull = attrs: builtins.removeAttrs attrs (builtins.filter (n: attrs.${n} == null) (builtins.attrNames attrs));
  nonEmpty = attrs: builtins.removeAttrs attrs (builtins.filter (n: attrs.${n} == null || attrs.${n} == [ ]) (builtins.attrNames attrs));
in
rec {
  # The daemons' state directories: the --state-dir of the --config file
  # must be the unit's StateDirectory.
  agentStateDir = "/var/lib/nixfleet-agent";
  cpStateDir = "/var/lib/nixfleet-cp";
  cpUser = "nixfleet-cp";
  # The local database of the control plane's postgresql.enable: its
  # socket, peer authentication as the service's user, a database of the
  # same name.
  cpLocalDatabase = "postgres://${cpUser}@/${cpUser}?host=/run/postgresql";

  # What a daemon's --config file holds (rfcs/0010 §3), by service: the
  # values of `settings` but nulls (a typed setting left null leaves the
  # daemon's default), and the keys the module sets from its other
  # options. The modules refuse those keys in `settings`
  # (settingsAssertions), so that no key has two sources.
  daemonSettings = {
    nixfleet-agent =
      pkgs: cfg:
      nonNull cfg.settings
      // {
        state-dir = agentStateDir;
        trust = "${trustPath pkgs "nixfleet-agent" cfg}";
        probes =
          if cfg.probesFile != null then
            cfg.probesFile
          else
            "${pkgs.writeText "nixfleet-agent-probes.json" (probesJSON cfg)}";
      };
    nixfleet-control-plane =
      pkgs: cfg:
      let
        s = nonNull cfg.settings;
        operatorsFile =
          if cfg.operatorsFile != null then
            cfg.operatorsFile
          else if cfg.operators == [ ] then
            null
          else
            "${pkgs.writeText "nixfleet-cp-operators.json" (operatorsJSON cfg.operators)}";
      in
      s
      // {
        state-dir = cpStateDir;
        repo = cfg.repository;
        trust = "${trustPath pkgs "nixfleet-cp" cfg}";
      }
      # An empty list of refs: none (an empty array would leave the
      # daemon's default).
      // lib.optionalAttrs (s ? watch-ref && s.watch-ref == [ ]) { watch-ref = [ "none" ]; }
      // lib.optionalAttrs cfg.postgresql.enable { db = cpLocalDatabase; }
      // lib.optionalAttrs (operatorsFile != null) { operators = operatorsFile; }
      // lib.optionalAttrs (cfg.tls.certFile != null) { tls-cert = cfg.tls.certFile; }
      // lib.optionalAttrs (cfg.notifications.webhooks != [ ]) {
        notifications.webhook = map webhookTable cfg.notifications.webhooks;
      };
  };

  # Assertions that settings holds none of the keys a module sets itself:
  # owned is { <key> = "<what sets it instead>"; }.
  settingsAssertions =
    name: settings: owned:
    map (k: {
      assertion = !(settings ? ${k});
      message = "services.${name}: settings cannot hold `${k}`: ${owned.${k}}.";
    }) (builtins.attrNames owned);

  # One [[notifications.webhook]] table of the control plane's --config
  # file; a secretFile is read from the credential notify-<name> in
  # systemd's credentials directory, which nixfleet-cp expands.
  webhookTable =
    w:
    nonEmpty {
      inherit (w)
        name
        url
        format
        events
        channels
        timeout
        ca
        ;
      secret-file = if w.secretFile == null then null else "\${CREDENTIALS_DIRECTORY}/notify-${w.name}";
      min-backoff = w.minBackoff;
      max-backoff = w.maxBackoff;
    };

  # A path in a systemd path list (ReadOnlyPaths=, ReadWritePaths=,
  # RequiresMountsFor=): one double-quoted C-style string with % doubled,
  # so that systemd splits it nowhere and expands no specifier in it ($ is
  # not expanded there).
  unitPath = p: builtins.toJSON (builtins.replaceStrings [ "%" ] [ "%%" ] p);

  # A Go duration ("30s", "5m", "1h30m").
  duration = types.strMatching "([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+";

  logLevel = mkOption {
    type = types.enum [
      "debug"
      "info"
      "warn"
      "error"
    ];
    default = "info";
    description = "Minimum level of the log lines written to the journal.";
  };

  logFormat = mkOption {
    type = types.enum [
      "text"
      "json"
    ];
    default = "json";
    description = "Format of the log lines: `json` objects, or `text` key=value lines for people reading `journalctl`.";
  };

  # services.<name>.trust and .trustFile (rfcs/0002 §5).
  trustOptions = {
    trust = mkOption {
      default = { };
      description = ''
        The trust roots, written to a trust.json in the store: the CI
        release key (with its rotation schedule) that signs every fleet and
        rollout manifest, and the binary-cache keys Nix must see on every
        closure. Ignored when `trustFile` is set.
      '';
      type = types.submodule {
        options = {
          ciReleaseKey = mkOption {
            default = { };
            description = "The CI release key slot (rfcs/0002 §5).";
            type = types.submodule {
              options = {
                current = slot "The key CI signs with now.";
                previous = slot "The key CI signed with before the last rotation; still accepted.";
                successor = slot "The key CI will sign with after the next rotation; accepted until `retireAt`.";
                retireAt = mkOption {
                  type = types.nullOr types.str;
                  default = null;
                  example = "2027-01-01T00:00:00Z";
                  description = "RFC 3339 time from which `current` is no longer accepted; needs `successor`.";
                };
                rejectBefore = mkOption {
                  type = types.nullOr types.str;
                  default = null;
                  example = "2026-11-21T00:00:00Z";
                  description = "RFC 3339 time before which every artifact is refused, whatever its key: the switch to pull after a key compromise.";
                };
              };
            };
          };
          cacheKeys = mkOption {
            type = types.listOf types.str;
            default = [ ];
            example = [ "cache.example.org-1:6NCHdD59X431o0gWypbMrAURkbJ16ZPMQFGspcDShjY=" ];
            description = ''
              Public keys of the binary caches, in Nix's `name:base64` form.
              The agent hands them to Nix as `trusted-public-keys` when it
              realises a closure, with `require-sigs` on.
            '';
          };
        };
      };
    };
    trustFile = mkOption {
      type = types.nullOr types.str;
      default = null;
      example = "/etc/nixfleet/trust.json";
      description = ''
        A trust.json managed outside Nix (for example rotated by hand). When
        set, `trust` is ignored.
      '';
    };
  };

  trustJSON =
    t:
    builtins.toJSON {
      schemaVersion = 1;
      ciReleaseKey = {
        current = keyJSON t.ciReleaseKey.current;
        previous = keyJSON t.ciReleaseKey.previous;
        successor = keyJSON t.ciReleaseKey.successor;
        inherit (t.ciReleaseKey) retireAt rejectBefore;
      };
      inherit (t) cacheKeys;
    };

  # The trust.json a service reads: trustFile, or one written from trust.
  trustPath =
    pkgs: name: cfg:
    if cfg.trustFile != null then cfg.trustFile else pkgs.writeText "${name}-trust.json" (trustJSON cfg.trust);

  trustAssertions = name: cfg: [
    {
      assertion = cfg.trustFile != null || cfg.trust.ciReleaseKey.current != null;
      message = "services.${name}: set trust.ciReleaseKey.current (or trustFile): without the CI release key nothing can be verified.";
    }
  ];

  # The agent's probes file (rfcs/0008 §Health probes).
  probesJSON =
    cfg:
    builtins.toJSON {
      failedUnits = nonNull {
        enabled = cfg.failedUnits.enable;
        inherit (cfg.failedUnits)
          command
          ignore
          interval
          timeout
          ;
      };
      probes = map (
        p:
        nonNull {
          inherit (p)
            name
            type
            url
            expectStatus
            address
            command
            interval
            timeout
            ;
        }
      ) cfg.probes;
    };

  # The control plane's operators file (rfcs/0007 §Authentication).
  operatorsJSON =
    operators:
    builtins.toJSON (
      map (o: {
        inherit (o) name role;
        key = if builtins.isString o.key then o.key else keyJSON o.key;
      }) operators
    );

  inherit keyType;

  # The categories of journal events a notification webhook may be sent
  # (rfcs/0006 §Notifications; controlplane/notify.Categories).
  notificationCategories = [
    "rollout_opened"
    "wave_promoted"
    "halted"
    "reverted"
    "converged"
    "failed"
    "approval_needed"
    "partial_visibility"
    "release_refused"
    "analysis"
    "forecast"
  ];

  # One ExecStart argument, quoted for systemd: a JSON string (systemd
  # reads C-style escapes inside double quotes) with % and $ doubled, so
  # that systemd expands neither specifiers nor variables in it.
  execArg = s: builtins.replaceStrings [ "%" "$" ] [ "%%" "$$" ] (builtins.toJSON s);
  # The command line: every word quoted, but raw words (systemd
  # specifiers such as %d/tls-key) only double-quoted.
  execLine =
    words:
    builtins.concatStringsSep " " (map (w: if builtins.isAttrs w then "\"${w.raw}\"" else execArg w) words);
}
