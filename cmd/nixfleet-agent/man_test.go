package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestManPage: nixfleet-agent(8) documents every flag of run.
func TestManPage(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"nixfleet-agent", "man"}, &out, &errs); code != 0 {
		t.Fatalf("nixfleet-agent man: exit %d: %s", code, errs.String())
	}
	page := out.String()
	if !strings.Contains(page, "\n.TH nixfleet-agent 8\n") {
		t.Errorf("the page does not begin as nixfleet-agent(8): %.80q", page)
	}
	for _, f := range runCommand().Flags {
		if name := f.Names()[0]; !strings.Contains(page, `\-\-`+name) && !strings.Contains(page, "--"+name) {
			t.Errorf("the page lacks --%s", name)
		}
	}
}
