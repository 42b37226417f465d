package main

import (
	"encoding/json"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/nixfleet/nixfleet/apiclient"
)

// The list commands read the server's pages (rfcs/0007 §Operator endpoints,
// §Hosts) one after another, following next, until the list ends or
// --limit items were read; --json prints them as one document, with the
// server's next when --limit stopped before the end.

// pageSizeFlag is the list commands' hidden --page-size: how many items
// each request asks for (the server's default when 0). Tests page through
// small fleets with it.
var pageSizeFlag = &cli.IntFlag{Name: "page-size", Hidden: true, Usage: "ask for `N` items a request"}

// pageFetch reads the page after cursor ("" for the first) of at most n
// items (the server's default when 0): its items, the answer as the
// server sent it, and the cursor of the next page ("" when none follows).
type pageFetch[T any] func(cursor string, n int) ([]T, json.RawMessage, string, error)

// listPages reads pages with fetch from cursor on until limit items (0:
// every one) or the list's end, asking for pageSize items a request (the
// server's default when 0) and never for more than most or than the
// limit leaves. It returns the items, each also as the server sent it
// (the member named member of each answer), and the cursor to continue
// from when it stopped at the limit before the end.
func listPages[T any](cursor string, limit, pageSize, most int, member string, fetch pageFetch[T]) (items []T, raws []json.RawMessage, next string, err error) {
	raws = []json.RawMessage{}
	for {
		n := pageSize
		if limit > 0 {
			if rest := min(limit-len(items), most); n == 0 || n > rest {
				n = rest
			}
		}
		page, raw, nx, err := fetch(cursor, n)
		if err != nil {
			return nil, nil, "", err
		}
		var doc map[string]json.RawMessage
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &doc); err == nil {
			err = json.Unmarshal(doc[member], &list)
		}
		if err != nil {
			return nil, nil, "", fmt.Errorf("%w: %v", apiclient.ErrBadResponse, err)
		}
		items, raws = append(items, page...), append(raws, list...)
		switch {
		case nx == "":
			return items, raws, "", nil
		case limit > 0 && len(items) >= limit:
			return items, raws, nx, nil
		case nx == cursor:
			return nil, nil, "", fmt.Errorf("%w: the page after %q names itself as next", apiclient.ErrBadResponse, cursor)
		}
		cursor = nx
	}
}

// checkPaging refuses a negative --limit or --page-size.
func checkPaging(c *cli.Context) error {
	if c.Int("limit") < 0 {
		return usage(c, "--limit must be 0 (every one) or more")
	}
	if c.Int("page-size") < 0 {
		return usage(c, "--page-size must be 0 (the server's) or more")
	}
	return nil
}
