package runbook

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Modes a shell block's fence can give it (```sh runbook=MODE).
const (
	modeRun       = ""              // run; must exit 0
	modeSkip      = "skip"          // never run: the document says why
	modeRoot      = "root"          // run with root and kernel BTF, else skipped
	modeNoGPUExit = "no-gpu-exit-1" // run; 0, or 1 for a check that needs a GPU
	modeMeasures  = "measures"      // run; 0, or what the host decided (hostDecided)
)

// block is one fenced shell block of a Markdown document.
type block struct {
	N    int    // 1-based, among the document's shell blocks
	Line int    // line of its opening fence
	Mode string // modeRun, modeSkip, ...
	Body string
}

// shellLangs are the fence languages whose blocks are commands.
var shellLangs = []string{"sh", "bash", "shell"}

// parseBlocks returns the shell blocks of a Markdown document. A fence is
// three or more backticks; its info string is the language, then
// attributes; runbook=MODE is the only attribute, and an unknown mode, an
// unknown attribute on a shell block or an unclosed fence is an error, so
// that a mistyped marker cannot quietly skip a block.
func parseBlocks(doc string) ([]block, error) {
	var (
		out   []block
		open  string // the fence that opened the current block, "" outside one
		cur   *block
		shell bool
		body  strings.Builder
	)
	sc := bufio.NewScanner(strings.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		trimmed := strings.TrimLeft(text, " ")
		if open != "" {
			if strings.HasPrefix(trimmed, open) && strings.Trim(trimmed, "`") == "" {
				if shell {
					cur.Body = body.String()
					out = append(out, *cur)
				}
				open, cur = "", nil
				continue
			}
			if shell {
				body.WriteString(text)
				body.WriteByte('\n')
			}
			continue
		}
		if !strings.HasPrefix(trimmed, "```") {
			continue
		}
		ticks := len(trimmed) - len(strings.TrimLeft(trimmed, "`"))
		open = strings.Repeat("`", ticks)
		info := strings.Fields(trimmed[ticks:])
		shell = len(info) > 0 && slices.Contains(shellLangs, info[0])
		if !shell {
			continue
		}
		cur = &block{N: len(out) + 1, Line: line}
		body.Reset()
		for _, attr := range info[1:] {
			mode, ok := strings.CutPrefix(attr, "runbook=")
			if !ok {
				return nil, fmt.Errorf("line %d: unknown attribute %q on a shell block (want runbook=MODE)", line, attr)
			}
			switch mode {
			case modeSkip, modeRoot, modeNoGPUExit, modeMeasures:
				cur.Mode = mode
			default:
				return nil, fmt.Errorf("line %d: runbook=%q: want %s, %s, %s or %s", line, mode, modeSkip, modeRoot, modeNoGPUExit, modeMeasures)
			}
		}
	}
	if open != "" {
		return nil, fmt.Errorf("a fenced block is not closed")
	}
	return out, nil
}

func TestParseBlocks(t *testing.T) {
	doc := "# t\n\n```sh\necho one\necho two\n```\n\ntext\n\n```yaml\nk: v\n```\n\n" +
		"  ```bash runbook=skip\nsudo x\n  ```\n````sh runbook=root\n```\ninner\n```\n````\n```sh runbook=no-gpu-exit-1\ny\n```\n```\nplain\n```\n" +
		"```shell runbook=measures\nz\n```\n"
	got, err := parseBlocks(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []block{
		{1, 3, modeRun, "echo one\necho two\n"},
		{2, 14, modeSkip, "sudo x\n"},
		{3, 17, modeRoot, "```\ninner\n```\n"},
		{4, 22, modeNoGPUExit, "y\n"},
		{5, 28, modeMeasures, "z\n"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{
		"```sh runbook=sometimes\nx\n```\n",
		"```sh skip\nx\n```\n",
		"```sh\nx\n",
	} {
		if _, err := parseBlocks(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
