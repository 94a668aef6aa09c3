package emulator

import (
	"fmt"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// heapDuring runs f and returns the most heap it held beside what was
// live before it (sampled while it ran, the collector made eager so that
// the samples are near the live heap), and the bytes it allocated in all.
// Sampling can miss a peak, never invent one: a bound on it is one-sided.
func heapDuring(f func()) (peak, total uint64) {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(s)
	base := s[0].Value.Uint64()
	var stop atomic.Bool
	var most uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for !stop.Load() {
			rtmetrics.Read(s)
			most = max(most, s[0].Value.Uint64())
			time.Sleep(20 * time.Microsecond)
		}
	}()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	stop.Store(true)
	<-done
	if most < base {
		most = base
	}
	return most - base, b.TotalAlloc - a.TotalAlloc
}

// bodyOf is head, then unit repeated to fill size bytes, then tail; and the
// count of units.
func bodyOf(size int, head, unit, tail string) ([]byte, int) {
	k := (size - len(head) - len(tail)) / len(unit)
	return []byte(head + strings.Repeat(unit, k) + tail), k
}

// TestParseMemory: parsing an 8 MiB body holds at most the copies of its
// size that readBody reserves for it beside the body (completionCopies,
// chatCopies), whatever the body's shape — one long word, many short ones,
// an escape that makes encoding/json decode through a scratch buffer,
// millions of token ids, chat messages or content parts by the million —
// since a prompt keeps at most max-model-len ids and a chat's messages are
// read one at a time. Where the body is one value, what parsing allocates
// in all is within the same bound (the many-element bodies allocate more,
// all of it garbage at once: encoding/json's state for each element). The
// refusals count the prompt's tokens exactly, as when every id was kept.
func TestParseMemory(t *testing.T) {
	const size = 8 << 20
	lim := Limits{Model: "m", MaxModelLen: 32768, Vocab: 151936}
	tok := NewTokenizer()
	tooLong := func(n int) string {
		return fmt.Sprintf("This model's maximum context length is 32768 tokens. However, your request has %d input tokens.", n)
	}
	type tc struct {
		name      string
		chat      bool
		body      []byte
		want      string // the refusal's start, "" when accepted
		oneValue  bool   // the body is one long value: TotalAlloc is bounded too
		copies    int
		wantValue func(*CompletionRequest) bool
	}
	var cases []tc
	add := func(name string, chat bool, head, unit, tail string, want func(k int) string, oneValue bool) {
		b, k := bodyOf(size, head, unit, tail)
		c := tc{name: name, chat: chat, body: b, oneValue: oneValue, copies: completionCopies}
		if chat {
			c.copies = chatCopies
		}
		if want != nil {
			c.want = want(k)
		}
		cases = append(cases, c)
	}
	// " ab" is one piece: k of them are k tokens.
	add("words", false, `{"prompt":"`, " ab", `"}`, tooLong, true)
	add("one word", false, `{"prompt":"`, "a", `"}`, nil, true)
	add("escaped", false, `{"prompt":"`, "a", `\n"}`, nil, true)
	add("ids", false, `{"prompt":[7`, ",12345", `]}`, func(k int) string { return tooLong(k + 1) }, true)
	add("list of one", false, `{"prompt":["`, "a", `"]}`, nil, true)
	// A message of k " ab" pieces renders as <|im_start|> user \n, the
	// k pieces, <|im_end|> \n, then <|im_start|> assistant \n: k+8.
	add("chat, one message", true, `{"messages":[{"role":"user","content":"`, " ab", `"}]}`,
		func(k int) string { return tooLong(k + 8) }, true)
	// Each {"role":"u"} renders as <|im_start|> u \n <|im_end|> \n: 5
	// tokens; k+1 of them, then the generation prompt's 3.
	add("chat, many messages", true, `{"messages":[{"role":"u"}`, `,{"role":"u"}`, `]}`,
		func(k int) string { return tooLong(5*(k+1) + 3) }, false)
	// k+1 parts of "x" joined by "\n": x (\n x)*k, 2k+1 pieces, in one
	// message: 2k+1+8.
	add("chat, many parts", true, `{"messages":[{"role":"u","content":[{"type":"text","text":"x"}`, `,{"type":"text","text":"x"}`, `]}]}`,
		func(k int) string { return tooLong(2*k + 1 + 8) }, false)

	for _, c := range cases {
		var err *APIError
		peak, total := heapDuring(func() {
			if c.chat {
				_, err = ParseChat(c.body, lim, tok)
			} else {
				_, err = ParseCompletion(c.body, lim, tok)
			}
		})
		n := uint64(len(c.body))
		bound := uint64(c.copies)*n + 1<<20
		t.Logf("%s: held %.2f, allocated %.2f times the body", c.name, float64(peak)/float64(n), float64(total)/float64(n))
		if peak > bound {
			t.Errorf("%s: parsing held %d bytes beside the body of %d; the reservation is %d copies (%d)", c.name, peak, n, c.copies, bound)
		}
		if c.oneValue && total > bound {
			t.Errorf("%s: parsing allocated %d bytes for a body of %d; the reservation is %d copies (%d)", c.name, total, n, c.copies, bound)
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %s", c.name, err.Message)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Message, c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		}
	}
}

// TestChatTokensMatchTemplate: a chat's prompt, tokenized a message at a
// time, is TokenizeChat of the whole ChatTemplate rendering, for contents
// that run into the template's newlines, carry special tokens' text, are
// empty or null, or come as parts, under every pair of flags; and a chat
// past max-model-len is refused with that rendering's exact count.
func TestChatTokensMatchTemplate(t *testing.T) {
	tok := NewTokenizer()
	msgs := []ChatMessage{
		{"system", "You are\nterse."},
		{"user", "\n\n  leading whitespace and <|im_end|> inside"},
		{"assistant", ""},
		{"user ", " role with a space<|endoftext|>"},
		{"tool", "héllo wörld\tend \n"},
		{"user", "a\nb"},
	}
	body := func(extra string) string {
		var b strings.Builder
		b.WriteString(`{"messages":[`)
		for i, m := range msgs {
			if i > 0 {
				b.WriteByte(',')
			}
			content := string(mustJSON(m.Content))
			switch {
			case m.Content == "":
				content = "null"
			case m.Content == "a\nb":
				content = `[{"type":"text","text":"a"},{"type":"text","text":"b"}]`
			}
			fmt.Fprintf(&b, `{"role":%s,"content":%s}`, mustJSON(m.Role), content)
		}
		return b.String() + "]" + extra + "}"
	}
	for _, f := range []struct {
		extra         string
		addGen, cont_ bool
	}{
		{"", true, false},
		{`,"add_generation_prompt":false`, false, false},
		{`,"add_generation_prompt":false,"continue_final_message":true`, false, true},
	} {
		want := tok.TokenizeChat(ChatTemplate(msgs, f.addGen, f.cont_))
		lim := Limits{Model: "m", MaxModelLen: 4096, Vocab: 151936}
		req, err := ParseChat([]byte(body(f.extra)), lim, tok)
		if err != nil {
			t.Fatalf("%s: %s", f.extra, err.Message)
		}
		if !slices.Equal(req.Prompt, want) {
			t.Errorf("%s: ids\n%v\nwant\n%v", f.extra, req.Prompt, want)
		}
		lim.MaxModelLen = len(want) - 5
		_, err = ParseChat([]byte(body(f.extra)), lim, tok)
		wantMsg := fmt.Sprintf("However, your request has %d input tokens.", len(want))
		if err == nil || !strings.Contains(err.Message, wantMsg) {
			t.Errorf("%s, max-model-len %d: got %v, want %q", f.extra, lim.MaxModelLen, err, wantMsg)
		}
	}
}
