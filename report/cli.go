package report

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hone-llm/hone/internal/atomicfile"
	"github.com/hone-llm/hone/internal/usage"
	"github.com/hone-llm/hone/optimizer"
)

// CommandOptions is what hone report takes: the flags, by name.
type CommandOptions struct {
	Log     string // --log: the experiment log (hone optimize's DIR/log.json)
	Out     string // --out: the Markdown file to write; plots go beside it
	Command string // --command: the command that produced the log
	Title   string // --title
	// Note gets the line that says where the report went.
	Note io.Writer
}

// Command is hone report: it renders o.Log as Markdown with plots and
// writes it to o.Out atomically. Bad input is a usage.Error.
func Command(o CommandOptions) error {
	if o.Log == "" || o.Out == "" {
		return usage.Errorf("--log and --out are required (the experiment log, and the Markdown file to write)")
	}
	lg, err := optimizer.ReadLog(o.Log)
	if err != nil {
		return usage.Wrap(err)
	}
	var buf bytes.Buffer
	if err := Write(&buf, lg, Options{Command: o.Command, PlotDir: filepath.Dir(o.Out), Title: o.Title}); err != nil {
		return usage.Wrap(err)
	}
	if err := atomicfile.Write(o.Out, buf.Bytes()); err != nil {
		return err
	}
	fmt.Fprintln(o.Note, "report written to", o.Out)
	return nil
}
