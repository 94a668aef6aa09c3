package diagnose

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/hone-llm/hone/deploy/proxy"
)

// FuzzParseTimelines feeds `hone diagnose --timelines` files to
// ParseTimelines. Seeds: the JSON lines a proxy wrote at exit
// (testdata/timelines.jsonl: a 1P1D request with its prefill leg's engine
// metrics, a colocated success and a failure), a GET /hone/timeline page
// (../deploy/proxy/testdata/timeline-page.json) and a JSON array.
// Property: the timelines the input holds (as ParseTimelines reads it, and
// as plain JSON values one after another, which is what a proxy writes)
// come back the same from each format diagnose reads, written the way it
// is written: one JSON object a line (Proxy.WriteTimelines), a page (GET
// /hone/timeline) and an array.
func FuzzParseTimelines(f *testing.F) {
	for _, p := range []string{"testdata/timelines.jsonl", "../deploy/proxy/testdata/timeline-page.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`[{"seq":1,"request_id":"a","path":"/v1/completions","received":{"unix_ns":1,"mono_ns":2},"outcome":"success","retries":0,"status":200}]`))
	f.Add([]byte(`{"request_id":"a","outcome":"success"}` + "\n" + `{"request_id":"b"}`))
	f.Add([]byte(`{"next":3,"timelines":[{"request_id":"a"}]}`))
	f.Add([]byte("  \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parsed, err := ParseTimelines(b)
		if err != nil {
			parsed = nil
		}
		// The timelines b spells as JSON values one after another, read
		// plainly: any of them is a timeline a proxy could write.
		var plain []proxy.Timeline
		dec := json.NewDecoder(bytes.NewReader(b))
		for {
			var tl proxy.Timeline
			if dec.Decode(&tl) != nil {
				break
			}
			plain = append(plain, tl)
		}
		for _, tls := range [][]proxy.Timeline{parsed, plain} {
			if len(tls) > 0 {
				roundTripTimelines(t, tls)
			}
		}
	})
}

// roundTripTimelines writes timelines in each format diagnose reads and
// checks that ParseTimelines gives them back.
func roundTripTimelines(t *testing.T, tls []proxy.Timeline) {
	t.Helper()
	want := timelinesJSONL(t, tls)
	page, err := json.Marshal(proxy.TimelinePage{Timelines: tls, Next: tls[len(tls)-1].Seq, Counts: proxy.Counts{}})
	if err != nil {
		t.Fatal(err)
	}
	array, err := json.Marshal(tls)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		format string
		b      []byte
	}{{"JSON lines", want}, {"page", page}, {"array", array}} {
		back, err := ParseTimelines(c.b)
		if err != nil {
			t.Fatalf("%d timelines written as %s do not read back: %v\n%s", len(tls), c.format, err, c.b)
		}
		if got := timelinesJSONL(t, back); !bytes.Equal(got, want) {
			t.Fatalf("timelines written as %s read back changed:\n got %s\nwant %s", c.format, got, want)
		}
	}
}

// timelinesJSONL writes timelines as Proxy.WriteTimelines does.
func timelinesJSONL(t *testing.T, tls []proxy.Timeline) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range tls {
		if err := enc.Encode(&tls[i]); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}
