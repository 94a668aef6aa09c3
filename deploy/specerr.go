package deploy

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// specYAMLError rewrites the YAML decoder's type errors in the spec's own
// terms: a field's path and the fields its section takes, where the
// decoder names a Go type ("field nosuch not found in type deploy.Spec",
// "cannot unmarshal !!str `m` into deploy.Model"). Other errors pass
// unchanged.
func specYAMLError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	lines := make([]string, len(te.Errors))
	for i, e := range te.Errors {
		lines[i] = specYAMLLine(e)
	}
	return errors.New(strings.Join(lines, "; "))
}

var (
	reUnknownField = regexp.MustCompile("^(line \\d+: )field (.+) not found in type (\\S+)$")
	reWrongType    = regexp.MustCompile("^(line \\d+: )cannot unmarshal (!!\\w+)(?: `(.*)`)? into (\\S+)$")
)

// specYAMLLine is one decoder error in the spec's terms.
func specYAMLLine(e string) string {
	sections := specSections()
	if m := reUnknownField.FindStringSubmatch(e); m != nil {
		s, ok := sections[m[3]]
		if !ok {
			return e
		}
		where := "the spec's top level"
		if len(s.paths) > 0 {
			where = strings.Join(s.paths, " or ")
		}
		return fmt.Sprintf("%sunknown field %q in %s, which takes %s", m[1], m[2], where, strings.Join(s.fields, ", "))
	}
	if m := reWrongType.FindStringSubmatch(e); m != nil {
		got := yamlTagName(m[2])
		if m[3] != "" {
			got = fmt.Sprintf("%s %q", got, m[3])
		}
		if s, ok := sections[m[4]]; ok && len(s.paths) > 0 {
			return fmt.Sprintf("%s%s: want a mapping (fields %s), got %s", m[1], strings.Join(s.paths, " or "), strings.Join(s.fields, ", "), got)
		}
		want, ok := goKindName[m[4]]
		switch {
		case strings.HasPrefix(m[4], "map["):
			want, ok = "a mapping", true
		case strings.HasPrefix(m[4], "[]"):
			want, ok = "a list", true
		}
		if ok {
			return fmt.Sprintf("%swant %s, got %s", m[1], want, got)
		}
	}
	return e
}

func joinPath(section, field string) string {
	if section == "" {
		return field
	}
	return section + "." + field
}

// goKindName names the scalar Go types of the spec as a spec's author
// knows them.
var goKindName = map[string]string{
	"int": "an integer", "int64": "an integer", "float64": "a number",
	"bool": "true or false", "string": "a string",
}

func yamlTagName(tag string) string {
	switch tag {
	case "!!str":
		return "the string"
	case "!!int", "!!float":
		return "the number"
	case "!!bool":
		return "the boolean"
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	}
	return tag
}

type specSection struct {
	paths  []string // where the type appears; none: the top level
	fields []string
}

// specSections maps each struct type of the spec (as the decoder names
// it, "deploy.Model") to its path in a spec file and the fields it takes.
func specSections() map[string]specSection {
	out := map[string]specSection{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		if s, seen := out[t.String()]; seen {
			s.paths = append(s.paths, path)
			out[t.String()] = s
			return
		}
		var fields []string
		type sub struct {
			t    reflect.Type
			path string
		}
		var subs []sub
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if !f.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			fields = append(fields, name)
			subs = append(subs, sub{f.Type, joinPath(path, name)})
		}
		sort.Strings(fields)
		s := specSection{fields: fields}
		if path != "" {
			s.paths = []string{path}
		}
		out[t.String()] = s
		for _, s := range subs {
			walk(s.t, s.path)
		}
	}
	walk(reflect.TypeOf(Spec{}), "")
	return out
}
