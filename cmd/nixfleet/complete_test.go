package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestCompletionIsBounded: a control plane that does not answer costs a
// completion completeTimeout, and the completion says nothing.
func TestCompletionIsBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers; the client gives up
	}))
	defer srv.Close()
	t.Setenv(completeWordEnv, "")
	t.Setenv(configEnv, "")
	for _, args := range [][]string{
		{"nixfleet", "rollout", "show", "--cp", srv.URL, "--generate-bash-completion"},
		{"nixfleet", "--cp", srv.URL, "host", "explain", "--generate-bash-completion"},
	} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := run(context.Background(), args, nil, &stdout, &stderr)
		took := time.Since(start)
		if code != 0 || stdout.Len() > 0 || stderr.Len() > 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and nothing", args, code, stdout.String(), stderr.String())
		}
		if took < completeTimeout/2 || took > completeTimeout+3*time.Second {
			t.Errorf("%q took %s; want about %s", args, took, completeTimeout)
		}
	}
}

func TestJustBefore(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": "", "web": "wea~", "web-1": "web-0~", "a!": "a ~", "é": "", "x\x01": ""} {
		if got := justBefore(in); got != want {
			t.Errorf("justBefore(%q) = %q, want %q", in, got, want)
		}
		if want != "" && !(want < in) {
			t.Errorf("justBefore(%q) = %q does not sort before it", in, want)
		}
	}
}
