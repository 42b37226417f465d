// Package cliapp is what the nixfleet commands share: running a urfave/cli
// app with the project's exit codes (0 ok, 1 failed, 2 usage), the
// binary's version from its build information ([Version], behind every
// command's --version), the environment variables that mirror flags, the
// daemons' log ([Logger]: --log-level and --log-format) and the
// configuration file.
//
// # Configuration
//
// nixfleet, nixfleet-cp and nixfleet-agent read their settings the same way
// (rfcs/0006 §Processes and configuration, rfcs/0008 §Command, rfcs/0009
// §Configuration). [Configure] gives each setting of a command its value:
//
//  1. the flag, when it was given on the command line (before the command
//     or on it: the innermost wins);
//  2. else its environment variable;
//  3. else its key in the configuration file, a TOML 1.1 document;
//  4. else the flag's default.
//
// The file is decoded strictly: a key the command does not know, a key given
// twice, one setting given under two of its names (a key and its alias,
// ConfigFile.Aliases, or two names of one flag), a value of the wrong TOML type (a string where a flag wants a
// duration like "30s", an integer, a boolean, an array of strings) and
// anything that is not TOML are a [ConfigError] naming the file and line,
// and every error Configure returns is a [UsageError] (exit 2).
//
// A command may also take tables that are no flag's (ConfigFile.Sections,
// like nixfleet-cp's [[notifications.webhook]]): Configure hands each to
// the command as a [Section], which decodes it as strictly (an unknown
// key, a value of the wrong type) and names the line of any key in its
// errors, also inside the second element of an array of tables.
package cliapp
