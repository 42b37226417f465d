package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// uiCommand is `nixfleet ui`: sign in to the dashboard with the operator's
// key and open it (rfcs/0011 §Sign-in).
func uiCommand() *cli.Command {
	return opCommand(&cli.Command{
		Name:  "ui",
		Usage: "open the control plane's dashboard in a browser, signed in with your operator key",
		Description: "Asks the control plane for a one-time sign-in link (proved with your key, like\n" +
			"every command), prints it and opens it with $BROWSER or xdg-open. The link\n" +
			"signs in whoever opens it first, once, within --valid; it becomes a session\n" +
			"cookie for the control plane's session lifetime. Do not paste it anywhere.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "no-browser", Usage: "only print the link"},
			&cli.DurationFlag{Name: "valid", Value: 2 * time.Minute, Usage: "how long the link may be opened (at most 1h)"},
		},
	}, nil, runUI)
}

func runUI(c *cli.Context, o *operator, _ []string) error {
	valid := c.Duration("valid")
	if valid < time.Second || valid > time.Hour {
		return usage(c, "--valid must be between 1s and 1h, not %s", valid)
	}
	login, raw, err := o.api.WebLogin(c.Context, int(valid/time.Second))
	if err != nil {
		return o.fail(c, err, "")
	}
	link := o.api.Link(login.Path)
	if c.Bool("json") {
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		m["url"] = link
		return writeJSON(c.App.Writer, m)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "dashboard for %s (%s); the link works once, until %s:\n  %s\n", login.Operator, login.Role,
		login.Expires.Local().Format("15:04:05"), link)
	if c.Bool("no-browser") {
		return nil
	}
	if err := openBrowser(link); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "could not open a browser (%v); open the link yourself\n", err)
	}
	return nil
}

// openBrowser starts $BROWSER (a command; "%s" in it stands for the link)
// or xdg-open, and does not wait for it.
func openBrowser(link string) error {
	name, args := "xdg-open", []string{link}
	if b := strings.TrimSpace(os.Getenv("BROWSER")); b != "" {
		f := strings.Fields(b)
		name, args = f[0], f[1:]
		if strings.Contains(b, "%s") {
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "%s", link)
			}
		} else {
			args = append(args, link)
		}
	}
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}
