package protocol

// The decoder DecodeBatch used before its one-pass rewrite, kept verbatim
// (renamed) as the oracle of the differential tests: it reads the version
// head with encoding/json, scans the keys (oracleCheckKeys), then decodes
// strictly with encoding/json. Do not "fix" it; it is the reference.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// oracleDecodeBatch is DecodeBatch as it was: three parses of data.
func oracleDecodeBatch(data []byte, limit int) (*Batch, error) {
	var b Batch
	if err := oracleDecodeStrict("batch", data, limit, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

func oracleDecodeStrict(kind string, data []byte, limit int, v validator) error {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	if len(data) > limit {
		return decodeErr(kind, ErrTooLarge, "%d bytes exceed the limit of %d", len(data), limit)
	}
	var head struct {
		V *json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return decodeErr(kind, ErrMalformed, "%s", oracleDescribe(err))
	}
	if head.V == nil {
		return decodeErr(kind, ErrVersion, "missing schema version \"v\" (this build speaks %d)", Version)
	}
	if ver, err := strconv.Atoi(string(*head.V)); err != nil || ver != Version {
		return decodeErr(kind, ErrVersion, "unsupported schema version %.20s (this build speaks %d)", *head.V, Version)
	}
	if err := oracleDecodeStrictJSON(data, v); err != nil {
		return decodeErr(kind, ErrMalformed, "%s", oracleDescribe(err))
	}
	return v.Validate()
}

func oracleDecodeStrictJSON(data []byte, v any) error {
	if err := oracleCheckKeys(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func oracleDescribe(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field == "" {
		return fmt.Sprintf("expected a JSON object, got %s", te.Value)
	}
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q: %s is not a %s", te.Field, te.Value, te.Type)
	}
	return err.Error()
}
func oracleCheckKeys(data []byte, t reflect.Type) error {
	s := oracleKeyScanner{data: data}
	return s.run(t)
}

// oracleStrictError is a key the strict decoder refuses.
type oracleStrictError struct{ msg string }

func (e *oracleStrictError) Error() string { return e.msg }

// oracleFrame is an open object or array.
type oracleFrame struct {
	array  bool
	fields *oracleStructFields // object of a struct type, else nil
	elem   reflect.Type        // array element, or map value type
	seen   uint64              // struct fields seen (by index)
	keys   map[string]struct{} // keys seen, in objects that are not structs
	label  []byte              // the key this value sits under ("[]" in arrays)
}

type oracleKeyScanner struct {
	data  []byte
	stack []oracleFrame
}

func (s *oracleKeyScanner) run(t reflect.Type) error {
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
				next, label = top.elem, oracleArrayLabel
			} else {
				expectKey = true
			}
		case '{':
			s.stack = append(s.stack, oracleObjectFrame(next, label))
			expectKey = true
		case '[':
			f := oracleFrame{array: true, label: label}
			if u := oracleDeref(next); u != nil && (u.Kind() == reflect.Slice || u.Kind() == reflect.Array) && u != oracleRawMessageType {
				f.elem = u.Elem()
			}
			s.stack = append(s.stack, f)
			next, label = f.elem, oracleArrayLabel
		case '}', ']':
			if len(s.stack) == 0 {
				return nil
			}
			s.stack = s.stack[:len(s.stack)-1]
			expectKey = false
		case '"':
			end, escaped := oracleStringEnd(d, i+1)
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
					return &oracleStrictError{fmt.Sprintf(err.Error(), s.path(key))}
				}
				label, expectKey = key, false
			}
			i = end
		default:
			// A number, true, false or null: skip to its end.
			for i+1 < len(d) && !oracleIsDelim(d[i+1]) {
				i++
			}
		}
	}
	return nil
}

var oracleArrayLabel = []byte("[]")

// path names key within the open frames, e.g. "events[].seq".
func (s *oracleKeyScanner) path(key []byte) string {
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

func oracleIsDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r', ':':
		return true
	}
	return false
}

// oracleStringEnd returns the index of the quote that closes the string starting
// at i, and whether it has escapes; -1 when it does not close.
func oracleStringEnd(d []byte, i int) (int, bool) {
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

func oracleDeref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func oracleObjectFrame(t reflect.Type, label []byte) oracleFrame {
	f := oracleFrame{label: label}
	switch u := oracleDeref(t); {
	case u == nil || u == oracleRawMessageType:
	case u.Kind() == reflect.Struct:
		f.fields = oracleJSONFields(u)
	case u.Kind() == reflect.Map:
		f.elem = u.Elem()
	}
	return f
}

// key checks one key of an object and returns the type of its value. An
// error's message has a %q verb for the key's path.
func (f *oracleFrame) key(key []byte) (reflect.Type, error) {
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

var oracleRawMessageType = reflect.TypeOf(json.RawMessage(nil))

// oracleStructFields are the json names of a struct's fields (at most 64).
type oracleStructFields struct {
	index map[string]int
	types []reflect.Type
}

func (sf *oracleStructFields) caseMatch(key string) string {
	for f := range sf.index {
		if strings.EqualFold(f, key) {
			return f
		}
	}
	return ""
}

var oracleFieldCache sync.Map // reflect.Type → *oracleStructFields

// oracleJSONFields maps the json names of t's exported fields to their types,
// following embedded structs the way encoding/json does.
func oracleJSONFields(t reflect.Type) *oracleStructFields {
	if m, ok := oracleFieldCache.Load(t); ok {
		return m.(*oracleStructFields)
	}
	sf := &oracleStructFields{index: map[string]int{}}
	oracleCollectFields(t, sf)
	if len(sf.types) > 64 {
		panic(fmt.Sprintf("protocol: %v has more than 64 JSON fields", t))
	}
	oracleFieldCache.Store(t, sf)
	return sf
}

func oracleCollectFields(t reflect.Type, sf *oracleStructFields) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			if ft := oracleDeref(f.Type); ft.Kind() == reflect.Struct {
				oracleCollectFields(ft, sf)
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
