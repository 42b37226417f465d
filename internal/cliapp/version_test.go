package cliapp

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	t.Parallel()
	rev := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}}
	tests := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{name: "module version", info: debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: rev}, want: "v1.2.3"},
		{name: "revision", info: debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev}, want: "0123456789ab"},
		{name: "modified tree", info: debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: append(rev[:2:2], debug.BuildSetting{Key: "vcs.modified", Value: "true"})}, want: "0123456789ab-modified"},
		{name: "clean tree", info: debug.BuildInfo{Settings: append(rev[:2:2], debug.BuildSetting{Key: "vcs.modified", Value: "false"})},
			want: "0123456789ab"},
		{name: "nothing known", info: debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, want: "devel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := versionOf(&tc.info); got != tc.want {
				t.Errorf("versionOf = %q, want %q", got, tc.want)
			}
		})
	}
}
