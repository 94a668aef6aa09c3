package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
)

// FuzzFetchTimelines feeds GET /hone/timeline answers to FetchTimelines,
// the client diagnose pages through a live proxy with. Seeds: a page a
// proxy served in front of an emulated 1P1D deployment
// (testdata/timeline-page.json), an empty page and near misses.
// Properties:
//   - FetchTimelines asks for ?since= the cursor it was given and a page of
//     MaxTimelinePage;
//   - a page it reads, served again as serveTimeline encodes it, reads back
//     the same: the encoding is a fixed point after one round, so nothing a
//     proxy says is lost or altered by the client.
func FuzzFetchTimelines(f *testing.F) {
	served, err := os.ReadFile("testdata/timeline-page.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(served, uint64(0))
	f.Add([]byte(`{"timelines":[],"next":12,"dropped":0,"counts":{"failed":0,"fallback":0,"success":12,"timeout":0}}`+"\n"), uint64(12))
	f.Add([]byte(`{"timelines":[{"seq":7,"request_id":"a","path":"/v1/chat/completions","received":{"unix_ns":1,"mono_ns":2},"outcome":"timeout","retries":2,"status":504,"error":"decode-0: no first byte in 30s"}],"next":7,"dropped":6,"counts":null}`), uint64(0))
	f.Add([]byte(`{"timelines":null}`), uint64(1<<63))
	f.Add([]byte(`[]`), uint64(0))
	f.Add([]byte(`{"timelines":[{"prefill":[{"engine_metrics":{"a" : [1, 2]}}]}]} trailing`), uint64(3))

	var (
		mu   sync.Mutex
		body []byte
		want uint64
		bad  string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		if r.URL.Path != "/hone/timeline" || q.Get("since") != strconv.FormatUint(want, 10) || q.Get("limit") != strconv.Itoa(MaxTimelinePage) {
			bad = r.URL.String()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	f.Cleanup(srv.Close)
	fetch := func(t *testing.T, b []byte, since uint64) (*TimelinePage, error) {
		mu.Lock()
		body, want, bad = b, since, ""
		mu.Unlock()
		p, err := FetchTimelines(context.Background(), srv.URL+"/", since)
		mu.Lock()
		defer mu.Unlock()
		if bad != "" {
			t.Fatalf("FetchTimelines(since %d) asked for %s", since, bad)
		}
		return p, err
	}
	encode := func(t *testing.T, p *TimelinePage) []byte {
		var b bytes.Buffer
		if err := json.NewEncoder(&b).Encode(p); err != nil {
			t.Fatalf("encode a page read back: %v", err)
		}
		return b.Bytes()
	}
	f.Fuzz(func(t *testing.T, b []byte, since uint64) {
		p, err := fetch(t, b, since)
		if err != nil {
			return
		}
		once := encode(t, p)
		p2, err := fetch(t, once, p.Next)
		if err != nil {
			t.Fatalf("page %s, served again, does not read: %v", once, err)
		}
		if twice := encode(t, p2); !bytes.Equal(once, twice) {
			t.Fatalf("page changed on a second round:\n%s\n%s", once, twice)
		}
	})
}
