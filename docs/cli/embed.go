package cli

import (
	"bufio"
	"embed"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

//go:embed *.md
var pages embed.FS

// Block is one fenced block of a page's Examples section.
type Block struct {
	// Info is the fence's info string: "sh", "sh skip: WHY" or "output".
	Info string
	// Text is the block's lines, joined by newlines.
	Text string
	// Line is the page's line of the opening fence.
	Line int
}

// Skip is why an example block is not run, "" when it is run.
func (b Block) Skip() string {
	_, why, ok := strings.Cut(b.Info, "skip:")
	if !ok {
		return ""
	}
	return strings.TrimSpace(why)
}

// Page is one command's help page.
type Page struct {
	Name string
	// Long is the Description block; Examples the Examples section's
	// blocks in order (output blocks included); Checked those of the
	// Checked examples section, which the test runs and --help leaves out.
	Long     string
	Examples []Block
	Checked  []Block
}

// Example is cobra's Example: the sh blocks' text joined by newlines.
func (p Page) Example() string {
	var parts []string
	for _, b := range p.Examples {
		if strings.HasPrefix(b.Info, "sh") {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Names lists the pages, sorted (a page's name is its file's less ".md").
func Names() []string {
	ents, _ := pages.ReadDir(".")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".md"))
	}
	slices.Sort(names)
	return names
}

// Lookup parses the page name.
func Lookup(name string) (Page, error) {
	b, err := pages.ReadFile(name + ".md")
	if err != nil {
		return Page{}, fmt.Errorf("docs/cli: no page %q", name)
	}
	p := Page{Name: name}
	var section string
	var fence *Block
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case fence == nil && strings.HasPrefix(line, "## "):
			section = strings.TrimPrefix(line, "## ")
		case fence == nil && strings.HasPrefix(line, "```"):
			fence, lines = &Block{Info: strings.TrimSpace(strings.TrimPrefix(line, "```")), Line: n}, nil
		case fence != nil && line == "```":
			fence.Text = strings.Join(lines, "\n")
			switch section {
			case "Description":
				p.Long = fence.Text
			case "Examples":
				p.Examples = append(p.Examples, *fence)
			case "Checked examples":
				p.Checked = append(p.Checked, *fence)
			}
			fence = nil
		case fence != nil:
			lines = append(lines, line)
		}
	}
	if fence != nil {
		return Page{}, fmt.Errorf("docs/cli/%s.md:%d: unclosed fence", name, fence.Line)
	}
	return p, nil
}

var placeholder = regexp.MustCompile(`{{[^{}]+}}`)

// Placeholders lists the {{name}}s of s, in order of first use.
func Placeholders(s string) []string {
	var names []string
	for _, m := range placeholder.FindAllString(s, -1) {
		if n := strings.TrimSpace(m[2 : len(m)-2]); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// Fill replaces each {{name}} of s by vars[name]; a name vars lacks is an
// error (a page and its command disagree).
func Fill(s string, vars map[string]string) (string, error) {
	var missing []string
	out := placeholder.ReplaceAllStringFunc(s, func(m string) string {
		n := strings.TrimSpace(m[2 : len(m)-2])
		v, ok := vars[n]
		if !ok {
			missing = append(missing, n)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("no value for %s", strings.Join(missing, ", "))
	}
	return out, nil
}
