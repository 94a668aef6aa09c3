package proxy

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
)

// streamUntil sends a streaming completion and reads its events with a
// client of its own until stop returns true for an event's data, then
// closes the connection at once, as hone replay does after [DONE]. It
// returns the data of the events read.
func streamUntil(t *testing.T, url string, body any, stop func(data string) bool) []string {
	t.Helper()
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", bytes.NewReader(mustJSON(body)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close() // before EOF: the transport closes the connection
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		events = append(events, data)
		if stop(data) {
			return events
		}
	}
	t.Fatalf("stream ended (%v) after %d events before the client meant to stop", sc.Err(), len(events))
	return nil
}

// oneTimeline waits for the proxy to record its only request. The proxy
// records it when it notices the client left, which takes a scheduler's
// whim, not a fixed time: the deadline is only there to end a broken test.
func oneTimeline(t *testing.T, px *testProxy) Timeline {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if tls, _ := px.Timelines(0, 0); len(tls) > 0 {
			if len(tls) != 1 {
				t.Fatalf("want one timeline, got %d: %+v", len(tls), tls)
			}
			return tls[0]
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy recorded no timeline")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestClientClosesAfterDone: a client that closes as soon as it has read
// [DONE], while the worker's stream has not yet ended on the proxy's side,
// got its whole answer. The proxy must record what the client saw — success,
// or fallback when the decode worker prefilled — not "client went away".
func TestClientClosesAfterDone(t *testing.T) {
	for _, c := range []struct {
		name        string
		cfg         func(dec *fakeEngine) Config
		wantOutcome string
	}{
		{"colocated", func(dec *fakeEngine) Config { return colocated(dec) }, OutcomeSuccess},
		{"disaggregated", func(dec *fakeEngine) Config {
			return disagg([]*fakeEngine{newFakeEngine(t, "p0")}, []*fakeEngine{dec})
		}, OutcomeSuccess},
		{"disaggregated, prefill dead", func(dec *fakeEngine) Config {
			pre := newFakeEngine(t, "p0")
			pre.srv.Close()
			return disagg([]*fakeEngine{pre}, []*fakeEngine{dec})
		}, OutcomeFallback},
	} {
		t.Run(c.name, func(t *testing.T) {
			dec := newFakeEngine(t, "d0")
			// The worker never ends its stream by itself: the proxy can only
			// finish once it notices the client has gone.
			dec.set(func(f *fakeEngine) { f.holdOpen = true })
			cfg := c.cfg(dec)
			cfg.StreamIdleTimeout = 10 * time.Minute // no stall verdict on a slow machine
			cfg.HealthInterval = time.Hour
			px := startProxy(t, cfg)
			events := streamUntil(t, px.URL, completion([]int{1, 2, 3}, 3), func(d string) bool { return d == "[DONE]" })
			if len(events) != 5 {
				t.Errorf("client read %d events, want 3 tokens, usage and [DONE]: %q", len(events), events)
			}
			tl := oneTimeline(t, px)
			if tl.Outcome != c.wantOutcome || strings.Contains(tl.Error, "client went away") || tl.Status != 200 {
				t.Errorf("outcome %q status %d error %q, want %q: the client got its whole answer", tl.Outcome, tl.Status, tl.Error, c.wantOutcome)
			}
			if tl.Decode == nil || tl.Decode.Error != "" {
				t.Errorf("decode leg %+v: a client closing after [DONE] is no fault of the worker's", tl.Decode)
			}
			if n := px.Counts()[c.wantOutcome]; n != 1 {
				t.Errorf("counts %v", px.Counts())
			}
		})
	}
}

// TestClientClosesMidStream: a client that leaves before [DONE] did not get
// its answer, whatever the worker does next.
func TestClientClosesMidStream(t *testing.T) {
	for _, stop := range []struct {
		name   string
		after  int  // events read before closing
		finish bool // close on the chunk with a finish_reason, before [DONE]
	}{
		{"after the first token", 1, false},
		{"after the final chunk, before [DONE]", 0, true},
	} {
		t.Run(stop.name, func(t *testing.T) {
			e := newFakeEngine(t, "r0")
			// The worker sends every token, the last with its
			// finish_reason, then nothing until the proxy leaves: the
			// client closes while the proxy waits on it.
			e.set(func(f *fakeEngine) { f.stallAfter = 4 })
			cfg := colocated(e)
			cfg.StreamIdleTimeout = 10 * time.Minute
			px := startProxy(t, cfg)
			n := 0
			streamUntil(t, px.URL, completion([]int{1, 2, 3}, 4), func(d string) bool {
				n++
				if stop.finish {
					return strings.Contains(d, `"finish_reason":"length"`)
				}
				return n == stop.after
			})
			tl := oneTimeline(t, px)
			if tl.Outcome != OutcomeFailed || !strings.Contains(tl.Error, "client went away") {
				t.Errorf("outcome %q error %q, want failed, client went away", tl.Outcome, tl.Error)
			}
		})
	}
}

// TestErrorEventIsFailure: a worker's error event fails the request for
// the client, though [DONE] follows it; the proxy must agree.
func TestErrorEventIsFailure(t *testing.T) {
	e := newFakeEngine(t, "r0")
	e.set(func(f *fakeEngine) { f.errorEvent = true })
	px := startProxy(t, colocated(e))
	status, _, body := post(t, px.URL, completion([]int{1, 2}, 3), nil)
	if status != 200 || !strings.Contains(body, "failing on purpose") && !strings.Contains(body, "failed on purpose") {
		t.Fatalf("%d %q", status, body)
	}
	tl := oneTimeline(t, px)
	if tl.Outcome != OutcomeFailed || !strings.Contains(tl.Error, "error event") {
		t.Errorf("outcome %q error %q, want failed on the error event", tl.Outcome, tl.Error)
	}
}

func TestEventWatch(t *testing.T) {
	long := "data: {" + strings.Repeat(`"x":1,`, 40) + `"y":2}` + "\n\n"
	for _, c := range []struct {
		name      string
		stream    string
		done, err bool
	}{
		{"done", long + "data: [DONE]\n\n", true, false},
		{"done, CRLF", "data: {}\r\n\r\ndata: [DONE]\r\n\r\n", true, false},
		{"done, no space", "data:[DONE]\n\n", true, false},
		{"done not yet dispatched", "data: {}\n\ndata: [DONE]\n", false, false},
		{"cut", long, false, false},
		{"comment", ": data: [DONE]\n\n", false, false},
		{"done in a longer line", "data: [DONE] and more\n\n", false, false},
		{"done inside a long line", "data: " + strings.Repeat("x", 40) + "[DONE]\n\n", false, false},
		{"done as a second data line", "data: {}\ndata: [DONE]\n\n", false, false},
		{"error then done", "data: {\"error\": {\"message\": \"boom\"}}\n\ndata: [DONE]\n\n", true, true},
		{"error key elsewhere", `data: {"id":"x","error":null}` + "\n\n", false, false},
	} {
		for _, split := range []int{0, 1, 3, 7} {
			var w eventWatch
			if split == 0 {
				w.write([]byte(c.stream))
			} else {
				for s := c.stream; len(s) > 0; {
					k := min(split, len(s))
					w.write([]byte(s[:k]))
					s = s[k:]
				}
			}
			if w.done != c.done || w.errEvent != c.err {
				t.Errorf("%s (writes of %d bytes): done %v error %v, want %v %v", c.name, split, w.done, w.errEvent, c.done, c.err)
			}
		}
	}
}

// FuzzEventWatch: what the watch concludes depends on the bytes written,
// never on how the writes split them.
func FuzzEventWatch(f *testing.F) {
	for _, s := range []string{"data: [DONE]\n\n", "data: {}\r\n\r\ndata: [DONE]\r\n\r\n", ": data: [DONE]\n\n",
		"data: {\"error\": {\"message\": \"boom\"}}\n\n", "data: " + strings.Repeat("x", 40) + "[DONE]\n\n"} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, stream string, split uint8) {
		var whole, parts eventWatch
		whole.write([]byte(stream))
		k := int(split%16) + 1
		for s := stream; len(s) > 0; {
			n := min(k, len(s))
			parts.write([]byte(s[:n]))
			s = s[n:]
		}
		if whole.done != parts.done || whole.errEvent != parts.errEvent {
			t.Fatalf("whole: done %v error %v; in %d-byte writes: done %v error %v", whole.done, whole.errEvent, k, parts.done, parts.errEvent)
		}
	})
}
