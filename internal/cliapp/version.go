package cliapp

import (
	"runtime/debug"
)

// Version is the version of the running binary, from its build
// information: the main module's version when the go command stamped one
// (a release tag, or a pseudo-version with "+dirty" for a modified tree),
// else the VCS revision (12 hex digits, "-modified" when the tree had
// uncommitted changes), else "devel".
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return versionOf(info)
}

func versionOf(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		rev += "-modified"
	}
	return rev
}
