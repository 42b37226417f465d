package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/internal/cliapp"
)

// The commands about nixfleet itself: its version, shell completion and
// manual pages (rfcs/0009 §The command itself).

// versionFlag is the app's --version: it prints the version and ends the
// command, whatever else the command line says.
var versionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version (with --json, as JSON) and exit"}

// hiddenJSONFlag lets "nixfleet --version --json" parse; the commands
// have their own --json.
var hiddenJSONFlag = &cli.BoolFlag{Name: "json", Hidden: true}

// errVersionShown ends a command line that asked for the version.
var errVersionShown = errors.New("version shown")

// showVersion is the app's Before: --version prints the version and stops.
func showVersion(c *cli.Context) error {
	if !c.Bool("version") {
		return nil
	}
	if err := printVersion(c, c.Bool("json")); err != nil {
		return err
	}
	return errVersionShown
}

func printVersion(c *cli.Context, asJSON bool) error {
	v := cliapp.Version()
	if asJSON {
		return writeJSON(c.App.Writer, map[string]string{"version": v, "go": runtime.Version()})
	}
	_, err := fmt.Fprintf(c.App.Writer, "%s version %s\n", programName, v)
	return err
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version: the module version, else the VCS revision (-modified when the tree was dirty)",
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage(c, "unexpected argument %q", c.Args().First())
			}
			return printVersion(c, c.Bool("json"))
		},
	}
}

// completionScripts are the bash and zsh scripts: both ask nixfleet itself
// for the words that may follow (urfave/cli's --generate-bash-completion),
// so that they follow the command tree of the binary they run, with the
// word being typed in NIXFLEET_COMPLETE_WORD (complete.go: rollout ids
// and host names come from the control plane).
var completionScripts = map[string]string{
	"bash": `# bash completion for nixfleet. Load it with
#   source <(nixfleet completion bash)
# or save it as ~/.local/share/bash-completion/completions/nixfleet.
_nixfleet() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local -a line=("${COMP_WORDS[@]:0:COMP_CWORD}")
  [[ $cur == -* ]] && line+=("$cur")
  local IFS=$'\n'
  COMPREPLY=($(compgen -W "$(NIXFLEET_COMPLETE_WORD=$cur "${line[@]}" --generate-bash-completion 2>/dev/null)" -- "$cur"))
}
complete -o default -F _nixfleet nixfleet
`,
	"zsh": `#compdef nixfleet
# zsh completion for nixfleet. Load it with
#   source <(nixfleet completion zsh)
# or save it as _nixfleet in a directory of $fpath.
_nixfleet() {
  local -a line words_out
  local cur=${words[CURRENT]}
  line=(${words[1,CURRENT-1]})
  [[ $cur == -* ]] && line+=($cur)
  words_out=("${(@f)$(_CLI_ZSH_AUTOCOMPLETE_HACK=1 NIXFLEET_COMPLETE_WORD=$cur ${line[@]} --generate-bash-completion 2>/dev/null)}")
  if [[ -n ${words_out[1]} ]]; then
    _describe 'nixfleet' words_out
  else
    _files
  fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _nixfleet "$@"
else
  compdef _nixfleet nixfleet
fi
`,
}

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "Bash: source <(nixfleet completion bash). Zsh: source <(nixfleet completion zsh),\n" +
			"or save it as _nixfleet in $fpath. Fish: nixfleet completion fish >\n" +
			"~/.config/fish/completions/nixfleet.fish.",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usage(c, "name one shell: bash, zsh or fish")
			}
			shell := c.Args().First()
			if s, ok := completionScripts[shell]; ok {
				_, err := fmt.Fprint(c.App.Writer, s)
				return err
			}
			if shell != "fish" {
				return usage(c, "no completion for shell %q (bash, zsh, fish)", shell)
			}
			s, err := c.App.ToFishCompletion()
			if err != nil {
				return failed(c, err, "")
			}
			_, err = fmt.Fprint(c.App.Writer, s)
			return err
		},
	}
}

func manCommand() *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print the manual page (roff), or with --dir write one page per command",
		Description: "Without --dir, the whole command tree is one page, nixfleet(1), on stdout:\n" +
			"nixfleet man | man -l -. With --dir, writes nixfleet.1 and nixfleet-COMMAND.1\n" +
			"for each command into the directory, and prints their names.",
		Flags: []cli.Flag{&cli.StringFlag{Name: "dir", Usage: "write the pages into `DIR` (created if missing)"}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage(c, "unexpected argument %q", c.Args().First())
			}
			pages, err := manPages(c.App, c.IsSet("dir"))
			if err != nil {
				return failed(c, err, "")
			}
			dir := c.String("dir")
			if !c.IsSet("dir") {
				_, err := fmt.Fprint(c.App.Writer, pages[0].text)
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return ioError(c, err)
			}
			for _, p := range pages {
				name := filepath.Join(dir, p.file)
				if err := os.WriteFile(name, []byte(p.text), 0o644); err != nil {
					return ioError(c, err)
				}
				fmt.Fprintln(c.App.Writer, name)
			}
			return nil
		},
	}
}

type manPage struct{ file, text string }

// manPages renders nixfleet(1), the whole tree, and with perCommand one
// page per visible top-level command, nixfleet-COMMAND(1).
func manPages(app *cli.App, perCommand bool) ([]manPage, error) {
	whole, err := app.ToManWithSection(1)
	if err != nil {
		return nil, err
	}
	pages := []manPage{{programName + ".1", whole}}
	if !perCommand {
		return pages, nil
	}
	for _, cmd := range app.VisibleCommands() {
		sub := &cli.App{
			Name:        programName + "-" + cmd.Name,
			Usage:       cmd.Usage,
			UsageText:   strings.TrimSpace(programName + " " + cmd.Name + " [options] " + cmd.ArgsUsage),
			Description: cmd.Description,
			Flags:       cmd.Flags,
			Commands:    cmd.Subcommands,
		}
		text, err := sub.ToManWithSection(1)
		if err != nil {
			return nil, fmt.Errorf("man page of %s: %w", cmd.Name, err)
		}
		pages = append(pages, manPage{sub.Name + ".1", text})
	}
	return pages, nil
}
