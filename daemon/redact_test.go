package daemon

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRedactArgs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Flags naming a secret: the next argument, or the =value.
		{"vllm serve m --api-key sk-abcdef0123456789abcd --port 8000", "vllm serve m --api-key [REDACTED] --port 8000"},
		{"vllm serve m --api-key=hunter2 --hf-token hf_x --hf_token=y", "vllm serve m --api-key=[REDACTED] --hf-token [REDACTED] --hf_token=[REDACTED]"},
		{"app --password p --client-secret s --db-passwd q --apiKey k", "app --password [REDACTED] --client-secret [REDACTED] --db-passwd [REDACTED] --apiKey [REDACTED]"},
		// A flag with no value before the next flag leaves that flag alone.
		{"app --api-key --port 1", "app --api-key --port 1"},
		// Names that only look alike are kept: counts, tokenizers, key files.
		{"vllm serve m --max-num-batched-tokens 8192 --tokenizer t --ssl-keyfile /k.pem --max-model-len 4096",
			"vllm serve m --max-num-batched-tokens 8192 --tokenizer t --ssl-keyfile /k.pem --max-model-len 4096"},
		// Environment-style assignments.
		{"env HF_TOKEN=abc OPENAI_API_KEY=xyz DB_PASSWORD=p AWS_SECRET_ACCESS_KEY=s PATH=/bin python x",
			"env HF_TOKEN=[REDACTED] OPENAI_API_KEY=[REDACTED] DB_PASSWORD=[REDACTED] AWS_SECRET_ACCESS_KEY=[REDACTED] PATH=/bin python x"},
		// Known token formats anywhere.
		{"curl -H Authorization:Bearer_x sk-proj-ABCDEFGHIJKLMNOPQRSTUV hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ012345",
			"curl -H Authorization:Bearer_x [REDACTED] [REDACTED]"},
		{"x ghp_0123456789abcdefghijABCDEFGHIJ AKIAABCDEFGHIJKLMNOP xoxb-1234567890-abcdef",
			"x [REDACTED] [REDACTED] [REDACTED]"},
		{"x --header=Authorization: Bearer abcdefgh12345678", "x --header=Authorization: Bearer [REDACTED]"},
		{"x https://user:pa55w0rd@host/repo.git", "x https://user:[REDACTED]@host/repo.git"},
		{`vllm serve m --kv-transfer-config {"kv_connector":"X","api_key":"s3cr3t","kv_role":"kv_both"}`,
			`vllm serve m --kv-transfer-config {"kv_connector":"X","api_key":"[REDACTED]","kv_role":"kv_both"}`},
		// Nothing to hide.
		{"python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-0.5B --port 8000",
			"python3 -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-0.5B --port 8000"},
	} {
		if got := strings.Join(redactArgs(strings.Split(tc.in, " ")), " "); got != tc.want {
			t.Errorf("redact %q\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if got := RedactCommandLine(tc.in); got != tc.want {
			t.Errorf("RedactCommandLine %q = %q", tc.in, got)
		}
	}
	// Arguments are redacted whole, spaces and all.
	if got := redactArgs([]string{"app", "--token", "two words", "--x"}); strings.Join(got, "|") != "app|--token|[REDACTED]|--x" {
		t.Errorf("got %q", got)
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr          string
		allow, remote bool
		ok            bool
	}{
		{"127.0.0.1:9464", false, false, true},
		{"127.0.0.2:9464", false, false, true},
		{"[::1]:9464", false, false, true},
		{"localhost:9464", false, false, true},
		{"off", false, false, true},
		{"", false, false, true},
		{"0.0.0.0:9464", false, true, false},
		{":9464", false, true, false},
		{"[::]:9464", false, true, false},
		{"10.1.2.3:9464", false, true, false},
		{"myhost:9464", false, true, false},
		{"0.0.0.0:9464", true, true, true},
		{"nonsense", true, false, false},
	} {
		remote, err := CheckListen(tc.addr, tc.allow, "token.txt")
		if (err == nil) != tc.ok || remote != tc.remote {
			t.Errorf("CheckListen(%q, %t) = %t, %v", tc.addr, tc.allow, remote, err)
		}
		if err != nil && tc.addr != "nonsense" && (!strings.Contains(err.Error(), "--listen") || !strings.Contains(err.Error(), "authentication") ||
			!strings.Contains(err.Error(), "command lines") || !strings.Contains(err.Error(), "--allow-remote")) {
			t.Errorf("CheckListen(%q): %v does not say why and how", tc.addr, err)
		}
	}
	// Remote needs a bearer token, even with --allow-remote.
	if _, err := CheckListen("0.0.0.0:9464", true, ""); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("remote without a token: %v", err)
	}
	if _, err := CheckListen("127.0.0.1:9464", false, ""); err != nil {
		t.Errorf("loopback without a token: %v", err)
	}
}

// With a token, every route answers 401 without it or with another one,
// and serves with it; token files others can read, or too short, are
// refused.
func TestBearerToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tok")
	if err := os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := ReadToken(good)
	if err != nil || tok != "0123456789abcdef0123" {
		t.Fatalf("ReadToken: %q %v", tok, err)
	}
	for name, c := range map[string]struct {
		body string
		mode os.FileMode
	}{"world-readable": {"0123456789abcdef0123", 0o644}, "short": {"short", 0o600}, "two words": {"0123456789abcdef 0123", 0o600}} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(p, []byte(c.body), c.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, c.mode)
		if _, err := ReadToken(p); err == nil || !strings.Contains(err.Error(), "--token-file") {
			t.Errorf("%s token file: %v", name, err)
		}
	}
	srv := httptest.NewServer(RequireToken(Handler(func() *Snapshot { return &Snapshot{} }), tok))
	defer srv.Close()
	for _, path := range []string{"/metrics", "/v1/snapshot", "/v1/threads"} {
		for auth, want := range map[string]int{"": 401, "Bearer wrong-token-0123456789": 401, "Bearer " + tok: 200,
			// RFC 7235: the scheme is case-insensitive, 1*SP before the token.
			"bearer " + tok: 200, "BEARER " + tok: 200, "bEaReR  " + tok: 200,
			"Basic " + tok: 401, tok: 401, "Bearer": 401, "Bearer " + tok + "x": 401, "Bearer" + tok: 401} {
			req, _ := http.NewRequest("GET", srv.URL+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s with %q: %d, want %d", path, auth, resp.StatusCode, want)
			}
		}
	}
}

func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		in       string
		uid, gid int
		ok       bool
	}{
		{"root", 0, 0, true},
		{"0", 0, 0, true},
		{"1234:99", 1234, 99, true},
		{"65534", 65534, 65534, true},
		{"", 65534, 65534, true}, // nobody
		{"no-such-user-here", 0, 0, false},
		{"-1", 0, 0, false},
		{"1:x", 0, 0, false},
	} {
		uid, gid, err := ParseUser(tc.in)
		if (err == nil) != tc.ok || tc.ok && (uid != tc.uid || gid != tc.gid) {
			t.Errorf("ParseUser(%q) = %d, %d, %v", tc.in, uid, gid, err)
		}
	}
}

// RedactCommandLine redacts a command line given as its arguments joined
// by spaces (as the snapshot shows it). Arguments that themselves held
// spaces are split, which can only redact more.
func RedactCommandLine(cl string) string {
	return strings.Join(redactArgs(strings.Split(cl, " ")), " ")
}
