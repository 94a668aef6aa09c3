package replay

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// chunkView is what hone reads from one completion stream event.
type chunkView struct {
	ids       []int // token ids carried by the choices, appended to the caller's slice
	output    bool  // some choice carried token ids or non-empty text
	finish    string
	hasFinish bool   // some choice had a non-null finish_reason
	usage     []byte // raw JSON of a non-null "usage"
	metrics   []byte // raw JSON of a non-null "metrics" (vLLM per-request metrics)
	errRaw    []byte // raw JSON of a non-null "error"
}

// errChunkSyntax marks an event that is not valid JSON at all, as opposed
// to valid JSON of the wrong shape.
var errChunkSyntax = errors.New("invalid JSON")

// errChunkDepth is nesting deeper than maxChunkDepth: valid JSON, refused.
var errChunkDepth = errors.New("JSON nested too deep")

// maxChunkDepth bounds nesting, as encoding/json does, so a hostile stream
// cannot exhaust the stack.
const maxChunkDepth = 1000

// parseChunk parses one event of a completion stream. It is a hand-written,
// validating JSON scanner that reads only the fields hone needs and skips
// the rest without allocating: with encoding/json, decoding 129 chunks per
// request was most of the client's CPU time and garbage, which showed up as
// dispatch lag in the open loop. Semantics: the event must be a JSON object;
// "choices" is null or an array of objects whose "token_ids" is null or an
// array of non-negative integers, "text" and "finish_reason" strings or
// null; "usage" is null or an object; duplicate keys: the last one wins, as
// with encoding/json. FuzzParseChunk checks it against encoding/json.
func parseChunk(b []byte, ids []int) (chunkView, error) {
	p := jsonParser{b: b}
	v := chunkView{ids: ids}
	base := len(ids)
	p.ws()
	if p.i < len(b) && b[p.i] != '{' {
		if err := p.value(0); err != nil {
			return v, err
		}
		return v, fmt.Errorf("event is not a JSON object")
	}
	p.i++
	for first := true; ; {
		key, more, err := p.member(&first)
		if err != nil {
			return v, err
		}
		if !more {
			break
		}
		switch string(key) {
		case "choices":
			v.ids, v.output, v.finish, v.hasFinish = v.ids[:base], false, "", false
			err = p.choices(&v)
		case "usage":
			start := p.i
			if p.null() {
				v.usage = nil
				break
			}
			isObj := p.i < len(b) && b[p.i] == '{'
			if err = p.value(1); err == nil && !isObj {
				err = fmt.Errorf("\"usage\" is not an object")
			}
			v.usage = b[start:p.i]
		case "metrics", "error":
			start := p.i
			var raw []byte
			if !p.null() {
				err = p.value(1)
				raw = b[start:p.i]
			}
			if string(key) == "metrics" {
				v.metrics = raw
			} else {
				v.errRaw = raw
			}
		default:
			err = p.value(1)
		}
		if err != nil {
			return v, err
		}
	}
	p.ws()
	if p.i != len(b) {
		return v, fmt.Errorf("%w: data after the object at byte %d", errChunkSyntax, p.i)
	}
	return v, nil
}

func (p *jsonParser) choices(v *chunkView) error {
	if p.null() {
		return nil
	}
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		if err := p.value(1); err != nil {
			return err
		}
		return fmt.Errorf("\"choices\" is not an array")
	}
	p.i++
	for first := true; ; {
		more, err := p.element(&first)
		if err != nil || !more {
			return err
		}
		if err := p.choice(v); err != nil {
			return err
		}
	}
}

// choice reads one choice object; per choice, the last of each key wins.
func (p *jsonParser) choice(v *chunkView) error {
	if p.i >= len(p.b) || p.b[p.i] != '{' {
		if err := p.value(2); err != nil {
			return err
		}
		return fmt.Errorf("a choice is not an object")
	}
	p.i++
	start := len(v.ids)
	var text, ids, fin bool
	var finish string
	for first := true; ; {
		key, more, err := p.member(&first)
		if err != nil {
			return err
		}
		if !more {
			break
		}
		switch string(key) {
		case "text":
			text = false
			if !p.null() {
				s, _, err := p.str()
				if err != nil {
					return err
				}
				text = len(s) > 0
			}
		case "token_ids":
			v.ids = v.ids[:start]
			ids = false
			if !p.null() {
				if v.ids, err = p.ints(v.ids); err != nil {
					return err
				}
				ids = len(v.ids) > start
			}
		case "finish_reason":
			fin, finish = false, ""
			if !p.null() {
				s, esc, err := p.str()
				if err != nil {
					return err
				}
				fin, finish = true, string(s)
				if esc || !utf8.Valid(s) { // encoding/json's escapes, and U+FFFD for each invalid byte
					var u string // its own variable: &u escapes, finish need not
					json.Unmarshal(p.b[p.i-len(s)-2:p.i], &u)
					finish = u
				}
			}
		default:
			if err := p.value(3); err != nil {
				return err
			}
		}
	}
	v.output = v.output || text || ids
	if fin {
		v.finish, v.hasFinish = finish, true
	}
	return nil
}

// jsonParser is a minimal validating JSON scanner over one buffer.
type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) syntax(what string) error {
	return fmt.Errorf("%w: %s at byte %d", errChunkSyntax, what, p.i)
}

func (p *jsonParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// null consumes a null literal if one is next.
func (p *jsonParser) null() bool {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// value skips any JSON value, validating it.
func (p *jsonParser) value(depth int) error {
	if depth > maxChunkDepth {
		return fmt.Errorf("%w at byte %d", errChunkDepth, p.i)
	}
	if p.i >= len(p.b) {
		return p.syntax("unexpected end")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		for first := true; ; {
			_, more, err := p.member(&first)
			if err != nil || !more {
				return err
			}
			if err := p.value(depth + 1); err != nil {
				return err
			}
		}
	case c == '[':
		p.i++
		for first := true; ; {
			more, err := p.element(&first)
			if err != nil || !more {
				return err
			}
			if err := p.value(depth + 1); err != nil {
				return err
			}
		}
	case c == '"':
		_, _, err := p.str()
		return err
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		_, _, err := p.number()
		return err
	}
	return p.syntax(fmt.Sprintf("unexpected %q", p.b[p.i]))
}

func (p *jsonParser) literal(s string) error {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return p.syntax("invalid literal")
	}
	p.i += len(s)
	return nil
}

// member advances to the next member of an object whose '{' was consumed:
// it returns the key with p at the value, or more=false after the closing
// brace. *first is true before the first member.
func (p *jsonParser) member(first *bool) (key []byte, more bool, err error) {
	p.ws()
	if p.i >= len(p.b) {
		return nil, false, p.syntax("unexpected end in object")
	}
	if *first {
		*first = false
		if p.b[p.i] == '}' {
			p.i++
			return nil, false, nil
		}
	} else {
		switch p.b[p.i] {
		case ',':
			p.i++
			p.ws()
		case '}':
			p.i++
			return nil, false, nil
		default:
			return nil, false, p.syntax("want ',' or '}'")
		}
	}
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false, p.syntax("want a key")
	}
	key, esc, err := p.str()
	if err != nil {
		return nil, false, err
	}
	if esc {
		var k string
		if err := json.Unmarshal(p.b[p.i-len(key)-2:p.i], &k); err != nil {
			return nil, false, p.syntax("bad key")
		}
		key = []byte(k)
	}
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != ':' {
		return nil, false, p.syntax("want ':'")
	}
	p.i++
	p.ws()
	return key, true, nil
}

// element advances to the next element of an array whose '[' was
// consumed, or returns more=false after the closing bracket.
func (p *jsonParser) element(first *bool) (more bool, err error) {
	p.ws()
	if p.i >= len(p.b) {
		return false, p.syntax("unexpected end in array")
	}
	if *first {
		*first = false
		if p.b[p.i] == ']' {
			p.i++
			return false, nil
		}
		return true, nil
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		p.ws()
		if p.i >= len(p.b) {
			// Every caller reads the next element at p.i.
			return false, p.syntax("unexpected end in array")
		}
		return true, nil
	case ']':
		p.i++
		return false, nil
	}
	return false, p.syntax("want ',' or ']'")
}

// str parses a string and returns its raw content (between the quotes)
// and whether it holds escapes.
func (p *jsonParser) str() (raw []byte, escaped bool, err error) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false, fmt.Errorf("want a string at byte %d", p.i)
	}
	start := p.i + 1
	for i := start; i < len(p.b); i++ {
		switch c := p.b[i]; {
		case c == '"':
			p.i = i + 1
			return p.b[start:i], escaped, nil
		case c == '\\':
			escaped = true
			i++
			if i >= len(p.b) {
				break
			}
			switch p.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(p.b) {
					p.i = i
					return nil, false, p.syntax("short \\u escape")
				}
				for _, h := range p.b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						p.i = i
						return nil, false, p.syntax("bad \\u escape")
					}
				}
				i += 4
			default:
				p.i = i
				return nil, false, p.syntax("bad escape")
			}
		case c < 0x20:
			p.i = i
			return nil, false, p.syntax("control character in string")
		}
	}
	p.i = len(p.b)
	return nil, false, p.syntax("unterminated string")
}

// number parses a JSON number; isInt reports one without fraction or
// exponent, and n is its value when it fits in an int32.
func (p *jsonParser) number() (n int64, isInt bool, err error) {
	b, i := p.b, p.i
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if n <= 1<<40 {
				n = n*10 + int64(b[i]-'0')
			}
		}
	default:
		p.i = i
		return 0, false, p.syntax("bad number")
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		isInt = false
		i++
		d := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
		if i == d {
			p.i = i
			return 0, false, p.syntax("bad fraction")
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		isInt = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		}
		if i == d {
			p.i = i
			return 0, false, p.syntax("bad exponent")
		}
	}
	p.i = i
	if neg {
		n = -n
	}
	return n, isInt, nil
}

// ints appends an array of token ids: integers in [0, 2^31).
func (p *jsonParser) ints(dst []int) ([]int, error) {
	if p.i >= len(p.b) || p.b[p.i] != '[' {
		if err := p.value(3); err != nil {
			return dst, err
		}
		return dst, fmt.Errorf("\"token_ids\" is not an array")
	}
	p.i++
	var typeErr error
	for first := true; ; {
		more, err := p.element(&first)
		if err != nil {
			return dst, err
		}
		if !more {
			return dst, typeErr
		}
		if c := p.b[p.i]; c == '-' || c >= '0' && c <= '9' {
			start := p.i
			n, isInt, err := p.number()
			if err != nil {
				return dst, err
			}
			if (!isInt || n < 0 || n >= 1<<31) && typeErr == nil {
				typeErr = fmt.Errorf("token id %s is not a non-negative integer", p.b[start:p.i])
			}
			dst = append(dst, int(n))
			continue
		}
		if err := p.value(4); err != nil {
			return dst, err
		}
		if typeErr == nil {
			typeErr = fmt.Errorf("a token id is not a number")
		}
	}
}
