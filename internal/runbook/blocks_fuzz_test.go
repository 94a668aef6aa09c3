package runbook

import "testing"

// FuzzParseBlocks: any Markdown gives blocks or an error, never a panic,
// and every block returned has a known mode and a line inside the text.
func FuzzParseBlocks(f *testing.F) {
	for _, s := range []string{"", "```sh\necho hi\n```\n", "```sh runbook=skip\nx\n```", "````bash\n```\n````", "```sh runbook=nope\n```", "```sh\nunclosed"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		blocks, err := parseBlocks(doc)
		if err != nil {
			return
		}
		lines := 1
		for _, c := range doc {
			if c == '\n' {
				lines++
			}
		}
		for _, b := range blocks {
			switch b.Mode {
			case modeRun, modeSkip, modeRoot, modeNoGPUExit, modeMeasures:
			default:
				t.Fatalf("block %d: mode %q", b.N, b.Mode)
			}
			if b.Line < 1 || b.Line > lines {
				t.Fatalf("block %d: line %d of %d", b.N, b.Line, lines)
			}
		}
	})
}
