package diagnose

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/hone-llm/hone/deploy/proxy"
)

// ReadTimelines reads proxy timelines from a file holding either a
// /hone/timeline page ({"timelines":[...]}), a JSON array of timelines, or
// one timeline per line.
func ReadTimelines(path string) ([]proxy.Timeline, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read timelines: %w", err)
	}
	tls, err := ParseTimelines(b)
	if err != nil {
		return nil, fmt.Errorf("timelines %s: %w", path, err)
	}
	return tls, nil
}

// ParseTimelines decodes the formats ReadTimelines accepts.
func ParseTimelines(b []byte) ([]proxy.Timeline, error) {
	s := strings.TrimSpace(string(b))
	switch {
	case s == "":
		return nil, fmt.Errorf("empty")
	case s[0] == '[':
		var tls []proxy.Timeline
		if err := json.Unmarshal(b, &tls); err != nil {
			return nil, fmt.Errorf("want a JSON array of timelines: %w", err)
		}
		return tls, nil
	case isPage(s):
		var page proxy.TimelinePage
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, fmt.Errorf("want a /hone/timeline page: %w", err)
		}
		return page.Timelines, nil
	}
	var tls []proxy.Timeline
	dec := json.NewDecoder(strings.NewReader(s))
	for dec.More() {
		var t proxy.Timeline
		if err := dec.Decode(&t); err != nil {
			return nil, fmt.Errorf("timeline %d: %w", len(tls)+1, err)
		}
		tls = append(tls, t)
	}
	return tls, nil
}

// isPage reports whether s, a document ParseTimelines reads, is a
// /hone/timeline page: its first JSON value is an object with a
// "timelines" member, which a timeline never has. A timeline's values may
// well spell "timelines" (a client chooses its request id), so the text
// alone does not decide, unless the first value does not decode: then a
// page's opening says which error is the helpful one.
func isPage(s string) bool {
	var first map[string]json.RawMessage
	if err := json.NewDecoder(strings.NewReader(s)).Decode(&first); err != nil {
		return strings.HasPrefix(s, `{"timelines"`) || strings.Contains(s[:min(len(s), 200)], `"timelines"`)
	}
	_, ok := first["timelines"]
	return ok
}

// FetchTimelines pages through a live proxy's GET /hone/timeline and
// returns every timeline it holds.
func FetchTimelines(ctx context.Context, base string) ([]proxy.Timeline, error) {
	var all []proxy.Timeline
	since := uint64(0)
	for {
		page, err := proxy.FetchTimelines(ctx, base, since)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Timelines...)
		if len(page.Timelines) == 0 || page.Next == since {
			return all, nil
		}
		since = page.Next
	}
}
