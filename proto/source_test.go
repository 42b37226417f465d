package proto_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/nixfleet/nixfleet/proto"
)

// TestValidSourceName: a Prometheus source name is what the schemas'
// pattern says (^[a-z0-9][a-z0-9_-]{0,62}$), but "default", which names
// the control plane's default source by leaving the name out.
func TestValidSourceName(t *testing.T) {
	t.Parallel()
	pattern := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"team-a", true}, {"a", true}, {"0", true}, {"mimir_eu-1", true}, {strings.Repeat("x", 63), true},
		{"", false}, {strings.Repeat("x", 64), false}, {"Team-a", false}, {"-a", false}, {"_a", false},
		{"a.b", false}, {"a b", false}, {"é", false}, {"default", false}, {"defaults", true},
	} {
		if got := proto.ValidSourceName(tc.name); got != tc.want {
			t.Errorf("ValidSourceName(%q) = %v, want %v", tc.name, got, tc.want)
		}
		if tc.name != proto.DefaultSource && pattern.MatchString(tc.name) != tc.want {
			t.Errorf("%q: ValidSourceName and the schemas' pattern disagree", tc.name)
		}
	}
}
