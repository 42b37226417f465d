# What the agent and control-plane modules share: the trust.json options,
# the JSON files the modules write, and the quoting of ExecStart.
#
# A function of nixpkgs' lib; the JSON builders use builtins only, so the
# tests (nix/tests/modules) call them on the options' values too.
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
in
rec {
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
  ];

  # The control plane's [[notifications.webhook]] tables (a TOML file for
  # --config; JSON strings and arrays of strings are TOML's too). A
  # secretFile is read from the credential notify-<name> in systemd's
  # credentials directory, which nixfleet-cp expands.
  notificationsTOML =
    webhooks:
    let
      line = k: v: "${k} = ${builtins.toJSON v}\n";
      opt = k: v: if v == null || v == [ ] then "" else line k v;
    in
    builtins.concatStringsSep "\n" (
      map (
        w:
        "[[notifications.webhook]]\n"
        + line "name" w.name
        + line "url" w.url
        + line "format" w.format
        + opt "events" w.events
        + opt "channels" w.channels
        + opt "secret-file" (if w.secretFile == null then null else "\${CREDENTIALS_DIRECTORY}/notify-${w.name}")
        + opt "timeout" w.timeout
        + opt "min-backoff" w.minBackoff
        + opt "max-backoff" w.maxBackoff
        + opt "ca" w.ca
      ) webhooks
    );

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
