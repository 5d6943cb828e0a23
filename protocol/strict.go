package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// checkKeys scans the JSON value data alongside the Go type t and refuses a
// key that is not exactly a json tag name of the struct it decodes into, and
// a key repeated within one object. It is a byte scanner (no tokens are
// allocated); malformed JSON is left to the decoder that runs after it,
// which reports it with a better message.
func checkKeys(data []byte, t reflect.Type) error {
	s := keyScanner{data: data}
	return s.run(t)
}

// strictError is a key the strict decoder refuses.
type strictError struct{ msg string }

func (e *strictError) Error() string { return e.msg }

// frame is an open object or array.
type frame struct {
	array  bool
	fields *structFields       // object of a struct type, else nil
	elem   reflect.Type        // array element, or map value type
	seen   uint64              // struct fields seen (by index)
	keys   map[string]struct{} // keys seen, in objects that are not structs
	label  []byte              // the key this value sits under ("[]" in arrays)
}

type keyScanner struct {
	data  []byte
	stack []frame
}

func (s *keyScanner) run(t reflect.Type) error {
	next := t        // type of the value that starts next
	var label []byte // the key it sits under
	expectKey := false
	d := s.data
	for i := 0; i < len(d); i++ {
		switch c := d[i]; c {
		case ' ', '\t', '\n', '\r', ':':
		case ',':
			if len(s.stack) == 0 {
				return nil
			}
			top := &s.stack[len(s.stack)-1]
			if top.array {
				next, label = top.elem, arrayLabel
			} else {
				expectKey = true
			}
		case '{':
			s.stack = append(s.stack, objectFrame(next, label))
			expectKey = true
		case '[':
			f := frame{array: true, label: label}
			if u := deref(next); u != nil && (u.Kind() == reflect.Slice || u.Kind() == reflect.Array) && u != rawMessageType {
				f.elem = u.Elem()
			}
			s.stack = append(s.stack, f)
			next, label = f.elem, arrayLabel
		case '}', ']':
			if len(s.stack) == 0 {
				return nil
			}
			s.stack = s.stack[:len(s.stack)-1]
			expectKey = false
		case '"':
			end, escaped := stringEnd(d, i+1)
			if end < 0 {
				return nil
			}
			if expectKey {
				if len(s.stack) == 0 {
					return nil
				}
				key := d[i+1 : end]
				if escaped {
					var k string
					if json.Unmarshal(d[i:end+1], &k) != nil {
						return nil
					}
					key = []byte(k)
				}
				var err error
				if next, err = s.stack[len(s.stack)-1].key(key); err != nil {
					return &strictError{fmt.Sprintf(err.Error(), s.path(key))}
				}
				label, expectKey = key, false
			}
			i = end
		default:
			// A number, true, false or null: skip to its end.
			for i+1 < len(d) && !isDelim(d[i+1]) {
				i++
			}
		}
	}
	return nil
}

var arrayLabel = []byte("[]")

// path names key within the open frames, e.g. "events[].seq".
func (s *keyScanner) path(key []byte) string {
	var b strings.Builder
	for _, f := range s.stack[1:] {
		if b.Len() > 0 && string(f.label) != "[]" {
			b.WriteByte('.')
		}
		b.Write(f.label)
	}
	if b.Len() > 0 {
		b.WriteByte('.')
	}
	b.Write(key)
	return b.String()
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r', ':':
		return true
	}
	return false
}

// stringEnd returns the index of the quote that closes the string starting
// at i, and whether it has escapes; -1 when it does not close.
func stringEnd(d []byte, i int) (int, bool) {
	escaped := false
	for ; i < len(d); i++ {
		switch d[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			return i, escaped
		}
	}
	return -1, escaped
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func objectFrame(t reflect.Type, label []byte) frame {
	f := frame{label: label}
	switch u := deref(t); {
	case u == nil || u == rawMessageType:
	case u.Kind() == reflect.Struct:
		f.fields = jsonFields(u)
	case u.Kind() == reflect.Map:
		f.elem = u.Elem()
	}
	return f
}

// key checks one key of an object and returns the type of its value. An
// error's message has a %q verb for the key's path.
func (f *frame) key(key []byte) (reflect.Type, error) {
	if f.fields != nil {
		i, ok := f.fields.index[string(key)]
		if !ok {
			if hint := f.fields.caseMatch(string(key)); hint != "" {
				return nil, fmt.Errorf("unknown field %%q (field names are case-sensitive: did you mean %q?)", hint)
			}
			return nil, errors.New("unknown field %q")
		}
		if f.seen&(1<<i) != 0 {
			return nil, errors.New("duplicate field %q")
		}
		f.seen |= 1 << i
		return f.fields.types[i], nil
	}
	if f.keys == nil {
		f.keys = map[string]struct{}{}
	}
	if _, dup := f.keys[string(key)]; dup {
		return nil, errors.New("duplicate field %q")
	}
	f.keys[string(key)] = struct{}{}
	return f.elem, nil
}

var rawMessageType = reflect.TypeOf(json.RawMessage(nil))

// structFields are the json names of a struct's fields (at most 64).
type structFields struct {
	index map[string]int
	types []reflect.Type
}

func (sf *structFields) caseMatch(key string) string {
	for f := range sf.index {
		if strings.EqualFold(f, key) {
			return f
		}
	}
	return ""
}

var fieldCache sync.Map // reflect.Type → *structFields

// jsonFields maps the json names of t's exported fields to their types,
// following embedded structs the way encoding/json does.
func jsonFields(t reflect.Type) *structFields {
	if m, ok := fieldCache.Load(t); ok {
		return m.(*structFields)
	}
	sf := &structFields{index: map[string]int{}}
	collectFields(t, sf)
	if len(sf.types) > 64 {
		panic(fmt.Sprintf("protocol: %v has more than 64 JSON fields", t))
	}
	fieldCache.Store(t, sf)
	return sf
}

func collectFields(t reflect.Type, sf *structFields) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			if ft := deref(f.Type); ft.Kind() == reflect.Struct {
				collectFields(ft, sf)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, dup := sf.index[name]; !dup {
			sf.index[name] = len(sf.types)
			sf.types = append(sf.types, f.Type)
		}
	}
}
