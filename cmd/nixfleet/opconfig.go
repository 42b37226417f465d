package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/internal/cliapp"
)

// The operator commands' connection settings (rfcs/0009 §Configuration):
// each comes from a flag, else an environment variable, else a key of the
// config file (TOML), read by cliapp.Configure like the daemons' settings.
// A key is its flag's name, as in the daemons' files; alias is the older
// name the file may still use (not both: cliapp refuses that).
var connSettings = []struct {
	flag, env, alias, usage string
}{
	{"cp", "NIXFLEET_CP_URL", "cp_url", "control plane `URL`: https://…, or http://… for nixfleet-cp --insecure-dev"},
	{"key", "NIXFLEET_KEY", "", "the operator's OpenSSH ed25519 private key `FILE`"},
	{"name", "NIXFLEET_NAME", "", "operator `NAME` put in the client certificate (informational)"},
	{"ca", "NIXFLEET_CA", "", "PEM `FILE` of the CA that signs the control plane's certificate (default: system roots)"},
}

// configKeys lists the config file's keys, for messages: "cp, key, name, ca".
func configKeys() string {
	names := make([]string, len(connSettings))
	for i, s := range connSettings {
		names[i] = s.flag
	}
	return strings.Join(names, ", ")
}

// configEnv names the config file when --config is not given.
const configEnv = "NIXFLEET_CONFIG"

// errBadConfig marks a config file that is not TOML, has a key we do not
// know, or a value that is not a string.
var errBadConfig = cliapp.ErrBadConfig

// connFlags are the connection flags, fresh for each command that takes
// them (urfave/cli keeps state in flag values).
func connFlags() []cli.Flag {
	fl := make([]cli.Flag, 0, len(connSettings)+1)
	for _, s := range connSettings {
		fl = append(fl, &cli.StringFlag{Name: s.flag, Category: "connection",
			Usage: fmt.Sprintf("%s (env %s, config %s)", s.usage, s.env, s.flag)})
	}
	return append(fl, &cli.StringFlag{Name: "config", Category: "connection",
		Usage: "config `FILE` (env " + configEnv + "; default $XDG_CONFIG_HOME/nixfleet/config.toml, else ~/.config/nixfleet/config.toml)"})
}

// connection is where and as whom the operator commands connect.
type connection struct {
	URL, Key, Name, CA string
	// from says where each non-empty setting came from, by flag name, for
	// messages: "--cp", "NIXFLEET_CP_URL", "/path/config.toml:3".
	from map[string]string
}

// resolveConnection reads the connection settings: flags (the innermost
// command's first, so that "nixfleet --cp X rollout list --cp Y" is Y),
// then the environment, then the config file. An empty value is unset;
// key and ca in the file are relative to it.
func resolveConnection(c *cli.Context, getenv func(string) string) (connection, error) {
	conn := connection{from: map[string]string{}}
	path, explicit := configPath(c, getenv)
	cf := cliapp.ConfigFile{Path: path, Optional: !explicit, Env: map[string]string{},
		Paths: []string{"key", "ca"}, EmptyIsUnset: true, Getenv: getenv}
	for _, s := range connSettings {
		cf.Keys = append(cf.Keys, cliapp.Key{Name: s.flag, Flag: s.flag})
		if s.alias != "" {
			cf.Aliases = append(cf.Aliases, cliapp.Key{Name: s.alias, Flag: s.flag})
		}
		cf.Env[s.flag] = s.env
	}
	src, err := cliapp.Configure(c, cf)
	if err != nil {
		return conn, err
	}
	for _, s := range connSettings {
		v, _ := cliapp.LocalString(c, s.flag)
		if v == "" {
			continue
		}
		conn.from[s.flag] = src.Of(s.flag)
		switch s.flag {
		case "cp":
			conn.URL = v
		case "key":
			conn.Key = v
		case "name":
			conn.Name = v
		case "ca":
			conn.CA = v
		}
	}
	return conn, nil
}

// configPath is the config file: --config, else $NIXFLEET_CONFIG, else
// the default path. explicit is false for the default, which need not
// exist; a file that was named must.
func configPath(c *cli.Context, getenv func(string) string) (path string, explicit bool) {
	if p, _ := cliapp.LocalString(c, "config"); p != "" {
		return p, true
	}
	if p := getenv(configEnv); p != "" {
		return p, true
	}
	return defaultConfigPath(getenv), false
}

// defaultConfigPath is $XDG_CONFIG_HOME/nixfleet/config.toml, else
// ~/.config/nixfleet/config.toml; "" when neither is known.
func defaultConfigPath(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "nixfleet", "config.toml")
	}
	if home := getenv("HOME"); home != "" {
		return filepath.Join(home, ".config", "nixfleet", "config.toml")
	}
	return ""
}
