package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestManPage: nixfleet-cp(8) documents every flag of serve.
func TestManPage(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"nixfleet-cp", "man"}, &out, &errs); code != 0 {
		t.Fatalf("nixfleet-cp man: exit %d: %s", code, errs.String())
	}
	page := out.String()
	if !strings.Contains(page, "\n.TH nixfleet-cp 8\n") {
		t.Errorf("the page does not begin as nixfleet-cp(8): %.80q", page)
	}
	for _, f := range serveCommand().Flags {
		if name := f.Names()[0]; !strings.Contains(page, `\-\-`+name) && !strings.Contains(page, "--"+name) {
			t.Errorf("the page lacks --%s", name)
		}
	}
}
