package main

import (
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// outputFormat is -o/--output, the output format, named the same way by
// every command (kubectl's habit): a file destination is always --out.
type outputFormat struct {
	value   string
	formats []string
}

// register adds -o/--output with def as its default. legacy names an older
// flag spelling kept as a hidden, deprecated alias of the same value
// (e.g. "format"), or "" for none.
func (o *outputFormat) register(f *pflag.FlagSet, def string, legacy string, formats ...string) {
	o.formats = formats
	f.StringVarP(&o.value, "output", "o", def, "output format: "+strings.Join(formats, " | "))
	if legacy != "" {
		f.StringVar(&o.value, legacy, def, "deprecated: use -o/--output")
		_ = f.MarkDeprecated(legacy, "use -o/--output")
	}
}

// check returns a usage error (exit 2) naming the flag when the value is
// not one of the formats.
func (o *outputFormat) check() error {
	if slices.Contains(o.formats, o.value) {
		return nil
	}
	return badInput("-o/--output: %q is not an output format: want %s", o.value, strings.Join(o.formats, ", "))
}
