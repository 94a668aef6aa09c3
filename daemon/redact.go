package daemon

import (
	"regexp"
	"strings"
	"unicode"
)

// Redacted replaces what looks like a secret in a command line.
const Redacted = "[REDACTED]"

// Secret-looking tokens anywhere in an argument: API keys of common
// providers, Hugging Face and GitHub tokens, AWS access key ids, Slack
// tokens, JWTs, bearer tokens, passwords in URLs, and key: value or
// key=value pairs whose key ends in key, token, secret or password (inside
// JSON configs such as --kv-transfer-config).
var secretPatterns = []struct {
	re   *regexp.Regexp
	repl string
}{
	{regexp.MustCompile(`\bsk-[A-Za-z0-9_-]{16,}`), Redacted},
	{regexp.MustCompile(`\bhf_[A-Za-z0-9]{16,}`), Redacted},
	{regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})`), Redacted},
	{regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`), Redacted},
	{regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`), Redacted},
	{regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`), Redacted},
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/-]{8,}=*`), "${1} " + Redacted},
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):[^/\s@]+@`), "${1}:" + Redacted + "@"},
	{regexp.MustCompile(`(?i)("?[A-Za-z0-9_.-]*(?:key|token|secret|password|passwd)"?\s*[:=]\s*"?)([^"\s,}&;]+)`), "${1}" + Redacted},
}

// secretWord says whether one word of a flag or variable name marks a
// secret: key, token, secret, password and words ending in them (apikey,
// hftoken), but not tokens, tokenizer or keyfile, which name counts and
// paths.
func secretWord(w string) bool {
	w = strings.ToLower(w)
	for _, s := range []string{"key", "token", "secret", "password", "passwd", "pwd", "credential", "credentials"} {
		if strings.HasSuffix(w, s) {
			return true
		}
	}
	return false
}

// secretName says whether a flag (--api-key, --hf_token) or environment
// variable name (OPENAI_API_KEY) names a secret.
func secretName(name string) bool {
	for _, w := range strings.FieldsFunc(name, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if secretWord(w) {
			return true
		}
	}
	return false
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// redactArgs returns a copy of a command's arguments with likely secrets
// replaced by Redacted: the value after a flag whose name marks a secret
// (--api-key VALUE, --api-key=VALUE) or after "Bearer", the value of an environment-style
// NAME=VALUE argument whose name contains KEY, TOKEN, SECRET, PASSWORD or
// CREDENTIAL, and tokens of known secret formats anywhere.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	valueNext := false
	for i, a := range args {
		if valueNext && !strings.HasPrefix(a, "--") {
			out[i] = Redacted
			valueNext = false
			continue
		}
		valueNext = false
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			name, _, hasValue := strings.Cut(a, "=")
			if secretName(name) {
				if hasValue {
					out[i] = name + "=" + Redacted
				} else {
					out[i] = a
					valueNext = true
				}
				continue
			}
		} else if name, _, ok := strings.Cut(a, "="); ok && envName.MatchString(name) {
			up := strings.ToUpper(name)
			for _, s := range []string{"KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"} {
				if strings.Contains(up, s) {
					a = name + "=" + Redacted
					break
				}
			}
		}
		for _, p := range secretPatterns {
			a = p.re.ReplaceAllString(a, p.repl)
		}
		out[i] = a
		// "Authorization: Bearer TOKEN" split into arguments.
		if l := strings.ToLower(a); l == "bearer" || l == "basic" || strings.HasSuffix(l, " bearer") || strings.HasSuffix(l, ":bearer") {
			valueNext = true
		}
	}
	return out
}
