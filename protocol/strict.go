package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// checkKeys walks the JSON value data alongside the Go type t and refuses a
// key that is not exactly a json tag name of the struct it decodes into, and
// a key repeated within one object. Malformed JSON is left to the decoder
// that runs after it (it reports it with a better message).
func checkKeys(data []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := walkValue(dec, t, "")
	var se *strictError
	if errors.As(err, &se) {
		return se
	}
	return nil
}

// strictError is a key the strict decoder refuses.
type strictError struct{ msg string }

func (e *strictError) Error() string { return e.msg }

func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '{':
		return walkObject(dec, t, path)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := walkValue(dec, elem, path+"[]"); err != nil {
				return err
			}
		}
		_, err := dec.Token()
		return err
	}
	return nil
}

func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct && t != rawMessageType {
		fields = jsonFields(t)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		name := key
		if path != "" {
			name = path + "." + key
		}
		if seen[key] {
			return &strictError{fmt.Sprintf("duplicate field %q", name)}
		}
		seen[key] = true
		var ft reflect.Type
		if fields != nil {
			var ok bool
			if ft, ok = fields[key]; !ok {
				if hint := caseMatch(fields, key); hint != "" {
					return &strictError{fmt.Sprintf("unknown field %q (field names are case-sensitive: did you mean %q?)", name, hint)}
				}
				return &strictError{fmt.Sprintf("unknown field %q", name)}
			}
		} else if t != nil && t.Kind() == reflect.Map {
			ft = t.Elem()
		}
		if err := walkValue(dec, ft, name); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}

func caseMatch(fields map[string]reflect.Type, key string) string {
	for f := range fields {
		if strings.EqualFold(f, key) {
			return f
		}
	}
	return ""
}

var (
	rawMessageType = reflect.TypeOf(json.RawMessage(nil))
	fieldCache     sync.Map // reflect.Type → map[string]reflect.Type
)

// jsonFields maps the json names of t's exported fields to their types,
// following embedded structs the way encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					m[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
