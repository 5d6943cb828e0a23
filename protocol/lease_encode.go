package protocol

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// MarshalLease encodes a lease as json.Marshal(l) does, byte for byte,
// without reflection and into one buffer of the right size: the
// coordinator publishes a lease per running job per round. A non-finite
// Start or Expiry is an error, as for json.Marshal.
func MarshalLease(l *Lease) ([]byte, error) {
	if l == nil {
		return []byte("null"), nil
	}
	n := 112 + len(l.Job) + len(l.Reason) + 6*len(l.Workers)
	for _, d := range l.Devices {
		n += 24 + len(d.Node) + 5*len(d.Devices)
	}
	return AppendLease(make([]byte, 0, n), l)
}

// AppendLease appends MarshalLease's encoding of l to dst.
func AppendLease(dst []byte, l *Lease) ([]byte, error) {
	if l == nil {
		return append(dst, "null"...), nil
	}
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"start", l.Start}, {"expiry", l.Expiry}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return dst, fmt.Errorf("protocol: lease %s: unsupported value %v", f.name, f.v)
		}
	}
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(l.V), 10)
	dst = append(dst, `,"job":`...)
	dst = appendJSONString(dst, l.Job)
	dst = append(dst, `,"round":`...)
	dst = strconv.AppendInt(dst, int64(l.Round), 10)
	dst = append(dst, `,"action":`...)
	dst = appendJSONString(dst, string(l.Action))
	if len(l.Workers) > 0 {
		dst = append(dst, `,"workers":`...)
		dst = appendInts(dst, l.Workers)
	}
	if len(l.Devices) > 0 {
		dst = append(dst, `,"devices":[`...)
		for i, d := range l.Devices {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"node":`...)
			dst = appendJSONString(dst, d.Node)
			dst = append(dst, `,"devices":`...)
			dst = appendInts(dst, d.Devices)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if l.Epoch != 0 {
		dst = append(dst, `,"epoch":`...)
		dst = strconv.AppendUint(dst, l.Epoch, 10)
	}
	if l.Extension {
		dst = append(dst, `,"extension":true`...)
	}
	dst = append(dst, `,"start":`...)
	dst = appendJSONFloat(dst, l.Start)
	dst = append(dst, `,"expiry":`...)
	dst = appendJSONFloat(dst, l.Expiry)
	if l.Reason != "" {
		dst = append(dst, `,"reason":`...)
		dst = appendJSONString(dst, l.Reason)
	}
	return append(dst, '}'), nil
}

// appendInts encodes a slice as encoding/json does (nil is null).
func appendInts(dst []byte, xs []int) []byte {
	if xs == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	for i, x := range xs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(x), 10)
	}
	return append(dst, ']')
}

// appendJSONFloat formats a finite float64 as encoding/json does (ES6
// number formatting: exponents only below 1e-6 and from 1e21, unpadded).
func appendJSONFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-07 → e-7
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// appendJSONString quotes s as json.Marshal does. Strings of printable
// ASCII that needs no escape (every id, action and node name that
// validates) are copied; others go through encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
