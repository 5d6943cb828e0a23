package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A pass reads one JSON message once, front to back: it checks the syntax
// (with encoding/json's rules and error messages), the keys (as the strict
// key check does: exact names, no repeats) and the JSON type of each value,
// while the typed decoder that drives it (batch_decode.go) stores the
// values. Errors of the three kinds rank as they did when each was a
// separate pass: a syntax error anywhere wins, so it ends the pass; the
// first key error and the first type error in document order are kept,
// and the caller ranks them after the schema version.
type pass struct {
	d      []byte
	i      int      // next byte to read
	depth  int      // open objects and arrays, the top-level one included
	labels [][]byte // the key each open container below the top level sits under ("[]" in arrays)
	frames []skipFrame

	keyErr  error      // first key refused: unknown, case-mismatched or repeated
	typeErr *typeError // first value of the wrong JSON type
	v       []byte     // raw value of the last top-level key "v" or "V" (nil: absent or null)
}

// maxDepth is encoding/json's nesting limit, so the same messages fail.
const maxDepth = 10000

// errEnd is encoding/json's message for input that stops inside a value.
var errEnd = errors.New("unexpected end of JSON input")

// typeError is a value of the wrong JSON type for its field (what
// encoding/json reports as an UnmarshalTypeError).
type typeError struct {
	field string // dotted JSON path without array indices, e.g. "events.seq"
	value string // "string", "object", "number 1.5", …
	typ   string // the Go type, e.g. "uint64"
}

// skipFrame is an open container of a skipped value.
type skipFrame struct {
	array bool
	keys  map[string]struct{}
}

var arrayKey = []byte("[]")

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (p *pass) ws() {
	for p.i < len(p.d) && isSpace(p.d[p.i]) {
		p.i++
	}
}

// fail reports the byte at p.i as invalid in context, or the end of the
// input when there is none (between tokens, encoding/json's scanner treats
// the end as a space and then finds the value incomplete).
func (p *pass) fail(context string) error {
	if p.i >= len(p.d) {
		return errEnd
	}
	return syntaxErr(p.d[p.i], context)
}

// failTok is fail inside a token, where the scanner's virtual space at the
// end of the input is itself the invalid character.
func (p *pass) failTok(context string) error {
	c := byte(' ')
	if p.i < len(p.d) {
		c = p.d[p.i]
	}
	return syntaxErr(c, context)
}

func syntaxErr(c byte, context string) error {
	return errors.New("invalid character " + quoteChar(c) + " " + context)
}

// quoteChar formats c as encoding/json's scanner does.
func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

// open enters the object or array at p.i.
func (p *pass) open() error {
	if p.depth++; p.depth > maxDepth {
		return syntaxErr(p.d[p.i], "exceeded max depth")
	}
	p.i++
	return nil
}

// str consumes the string at p.i (its opening quote) and reports whether it
// has escapes and bytes outside ASCII.
func (p *pass) str() (escaped, wide bool, err error) {
	d := p.d
	i := p.i + 1
	for i < len(d) {
		switch c := d[i]; {
		case c == '"':
			p.i = i + 1
			return escaped, wide, nil
		case c == '\\':
			escaped = true
			if i, err = p.escape(i + 1); err != nil {
				return escaped, wide, err
			}
		case c < 0x20:
			p.i = i
			return escaped, wide, p.failTok("in string literal")
		default:
			wide = wide || c >= 0x80
			i++
		}
	}
	p.i = i
	return escaped, wide, errEnd
}

// escape checks the escape sequence after the backslash at i-1 and returns
// the index after it.
func (p *pass) escape(i int) (int, error) {
	d := p.d
	if i < len(d) {
		switch d[i] {
		case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
			return i + 1, nil
		case 'u':
			for k := 1; k <= 4; k++ {
				if i+k >= len(d) || !isHex(d[i+k]) {
					p.i = i + k
					return 0, p.failTok(`in \u hexadecimal character escape`)
				}
			}
			return i + 5, nil
		}
	}
	p.i = i
	return 0, p.failTok("in string escape code")
}

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number consumes the number at p.i (a '-' or a digit) and returns its
// text and whether it is an integer (no fraction, no exponent).
func (p *pass) number() (lit []byte, integer bool, err error) {
	d, start, i := p.d, p.i, p.i
	if d[i] == '-' {
		if i++; i >= len(d) || !isDigit(d[i]) {
			p.i = i
			return nil, false, p.failTok("in numeric literal")
		}
	}
	if d[i] == '0' {
		i++
	} else {
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	integer = true
	if i < len(d) && d[i] == '.' {
		integer = false
		if i++; i >= len(d) || !isDigit(d[i]) {
			p.i = i
			return nil, false, p.failTok("after decimal point in numeric literal")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		integer = false
		if i++; i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			p.i = i
			return nil, false, p.failTok("in exponent of numeric literal")
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	p.i = i
	return d[start:i], integer, nil
}

// literal consumes true, false or null at p.i (its first letter).
func (p *pass) literal() error {
	word := "null"
	switch p.d[p.i] {
	case 't':
		word = "true"
	case 'f':
		word = "false"
	}
	for k := 1; k < len(word); k++ {
		if i := p.i + k; i >= len(p.d) || p.d[i] != word[k] {
			p.i = i
			return p.failTok(fmt.Sprintf("in literal %s (expecting %q)", word, word[k]))
		}
	}
	p.i += len(word)
	return nil
}

// key reads an object key and its colon; p.i is after the opening brace or
// a comma. A key with escapes is unescaped (by encoding/json: rare).
func (p *pass) key() ([]byte, error) {
	p.ws()
	if p.i >= len(p.d) || p.d[p.i] != '"' {
		return nil, p.fail("looking for beginning of object key string")
	}
	start := p.i
	escaped, _, err := p.str()
	if err != nil {
		return nil, err
	}
	key := p.d[start+1 : p.i-1]
	if escaped {
		var k string
		if err := json.Unmarshal(p.d[start:p.i], &k); err != nil {
			return nil, err // not reached: str checked the syntax
		}
		key = []byte(k)
	}
	p.ws()
	if p.i >= len(p.d) || p.d[p.i] != ':' {
		return nil, p.fail("after object key")
	}
	p.i++
	if p.ws(); p.i >= len(p.d) {
		return nil, errEnd // the value is missing
	}
	return key, nil
}

// more moves past the comma after an object member and reports true, or
// past the closing brace (leaving the object) and reports false.
func (p *pass) more() (bool, error) {
	p.ws()
	if p.i < len(p.d) {
		switch p.d[p.i] {
		case ',':
			p.i++
			return true, nil
		case '}':
			p.i++
			p.depth--
			return false, nil
		}
	}
	return false, p.fail("after object key:value pair")
}

// moreElems is more for arrays.
func (p *pass) moreElems() (bool, error) {
	p.ws()
	if p.i < len(p.d) {
		switch p.d[p.i] {
		case ',':
			p.i++
			p.ws()
			return true, nil
		case ']':
			p.i++
			p.depth--
			return false, nil
		}
	}
	return false, p.fail("after array element")
}

// empty reports (and consumes) the closing bracket of a container just
// opened when it has no members.
func (p *pass) empty(closing byte) bool {
	p.ws()
	if p.i < len(p.d) && p.d[p.i] == closing {
		p.i++
		p.depth--
		return true
	}
	return false
}

// path names key within the open containers, e.g. "events[].seq".
func (p *pass) path(key []byte) string {
	var b strings.Builder
	for _, l := range p.labels {
		if b.Len() > 0 && string(l) != "[]" {
			b.WriteByte('.')
		}
		b.Write(l)
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.Write(key)
	return b.String()
}

// refuseKey keeps the first key error; format has one %q for the key's path.
func (p *pass) refuseKey(format string, key []byte) {
	if p.keyErr == nil {
		p.keyErr = errors.New(fmt.Sprintf(format, p.path(key)))
	}
}

// refuseType keeps the first type error; field is built only when kept.
func (p *pass) refuseType(prefix, name, value, typ string) {
	if p.typeErr == nil {
		if prefix != "" {
			name = prefix + "." + name
		}
		p.typeErr = &typeError{field: name, value: value, typ: typ}
	}
}

// kindOf names the JSON type of the value starting with c, as
// encoding/json's type errors do ("number" without its text).
func kindOf(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// skip consumes one value that decodes into nothing (a value of the wrong
// JSON type, or of an unknown key) with label the key it sits under. The
// keys of its objects are still checked for repeats, as the strict key
// check did; it keeps its own stack, so nesting costs no Go stack.
func (p *pass) skip(label []byte) error {
	base := len(p.frames)
	for {
		opened, err := p.skipOne(label)
		if err != nil {
			return err
		}
		if !opened {
			// A value ended: leave the containers it ended.
			for !opened {
				if len(p.frames) == base {
					return nil
				}
				if p.frames[len(p.frames)-1].array {
					opened, err = p.moreElems()
				} else {
					opened, err = p.more()
				}
				if err != nil {
					return err
				}
				if !opened {
					p.frames = p.frames[:len(p.frames)-1]
					p.labels = p.labels[:len(p.labels)-1]
				}
			}
		}
		// The next member of the innermost container.
		if f := &p.frames[len(p.frames)-1]; f.array {
			label = arrayKey
		} else if label, err = p.skipKey(f); err != nil {
			return err
		}
	}
}

// skipOne consumes a scalar or an empty container (false), or opens a
// container that has members (true).
func (p *pass) skipOne(label []byte) (bool, error) {
	p.ws()
	if p.i >= len(p.d) {
		return false, errEnd
	}
	switch c := p.d[p.i]; c {
	case '{', '[':
		if err := p.open(); err != nil {
			return false, err
		}
		if p.empty(c + 2) { // '}' and ']' follow '{' and '[' by 2
			return false, nil
		}
		p.labels = append(p.labels, label)
		p.frames = append(p.frames, skipFrame{array: c == '['})
		return true, nil
	case '"':
		_, _, err := p.str()
		return false, err
	case 't', 'f', 'n':
		return false, p.literal()
	default:
		if c == '-' || isDigit(c) {
			_, _, err := p.number()
			return false, err
		}
		return false, p.fail("looking for beginning of value")
	}
}

// skipKey reads a key of an object in a skipped value and refuses a repeat.
func (p *pass) skipKey(f *skipFrame) ([]byte, error) {
	key, err := p.key()
	if err != nil {
		return nil, err
	}
	if f.keys == nil {
		f.keys = map[string]struct{}{}
	}
	if _, dup := f.keys[string(key)]; dup {
		p.refuseKey("duplicate field %q", key)
	} else {
		f.keys[string(key)] = struct{}{}
	}
	return key, nil
}
