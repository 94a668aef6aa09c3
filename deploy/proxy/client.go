package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/hone-llm/hone/internal/atomicfile"
)

// LoadConfig reads a JSON config written by deploy (`hone proxy --config`).
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read proxy config: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("proxy config %s: %w", path, err)
	}
	return c, nil
}

// FetchTimelines reads one page of GET /hone/timeline from a running proxy:
// at most MaxTimelinePage timelines finished after cursor since, and the
// cursor for next time. Loop until a page comes back empty to read
// everything (diagnose.FetchTimelines does).
func FetchTimelines(ctx context.Context, proxyURL string, since uint64) (*TimelinePage, error) {
	u := strings.TrimRight(proxyURL, "/") + "/hone/timeline?since=" + strconv.FormatUint(since, 10) +
		"&limit=" + strconv.Itoa(MaxTimelinePage)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch timelines: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("fetch timelines: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var p TimelinePage
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, fmt.Errorf("fetch timelines: %w", err)
	}
	return &p, nil
}

// WriteTimelines writes every timeline the proxy still holds to path, one
// JSON object a line, through a synced temporary file and a rename.
func (p *Proxy) WriteTimelines(path string) (int, error) {
	tls, _, _ := p.tl.since(0, 0)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range tls {
		if err := enc.Encode(&tls[i]); err != nil {
			return 0, fmt.Errorf("write timelines: %w", err)
		}
	}
	if err := atomicfile.Write(path, buf.Bytes()); err != nil {
		return 0, fmt.Errorf("write timelines: %w", err)
	}
	return len(tls), nil
}
