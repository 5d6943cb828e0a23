// Package wire is the little binary codec of the coordinator's snapshots:
// fixed-width little-endian integers, IEEE-754 bit patterns for floats (so
// NaN, ±Inf and every last bit survive a round trip), and length-prefixed
// strings and slices.
//
// Decoding is strict and bounded: every read checks the bytes left, every
// length is checked against the bytes that could hold it before anything
// is allocated, and the first error sticks (later reads return zero
// values), so a decoder of hostile input allocates at most in proportion
// to its input and never panics.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
)

// ErrShort is returned when the input ends inside a value.
var ErrShort = errors.New("wire: truncated input")

// Encoder appends values to a byte slice. Each time what it encoded
// passes another yieldBytes, at the end of a string or a blob, it yields
// its processor (runtime.Gosched): the coordinator encodes its snapshots
// on goroutines of their own beside its event loop, and on two cores a
// goroutine that computes for tens of milliseconds without a pause
// keeps a processor the loop may be waiting for (coordinator/yield.go).
// Where nothing else is waiting a yield costs a fraction of a microsecond.
type Encoder struct {
	buf  []byte
	next int // the length at which the encoder next yields
}

// yieldBytes is how much an Encoder encodes between yields: well under a
// millisecond of the snapshots' encoding.
const yieldBytes = 64 << 10

// pace yields the processor when the encoding passed its next mark.
func (e *Encoder) pace() {
	if len(e.buf) < e.next {
		return
	}
	if e.next > 0 {
		runtime.Gosched()
	}
	e.next = len(e.buf) + yieldBytes
}

// Bytes returns what was encoded.
func (e *Encoder) Bytes() []byte { return e.buf }

// Grow makes room for n more bytes. An encoder of a large value sized
// this way up front allocates its buffer once, not the several times
// over its size that growing by appends costs.
func (e *Encoder) Grow(n int) {
	if n > 0 {
		e.buf = slices.Grow(e.buf, n)
	}
}

// GrowLike makes room for a value about as long as the last one of its
// kind, last bytes, with an eighth more (0: nothing yet).
func (e *Encoder) GrowLike(last int) { e.Grow(last + last/8) }

// U64 appends v.
func (e *Encoder) U64(v uint64) { e.buf = binary.LittleEndian.AppendUint64(e.buf, v) }

// I64 appends v.
func (e *Encoder) I64(v int64) { e.U64(uint64(v)) }

// Int appends v as 64 bits.
func (e *Encoder) Int(v int) { e.U64(uint64(int64(v))) }

// F64 appends the bit pattern of v.
func (e *Encoder) F64(v float64) { e.U64(math.Float64bits(v)) }

// Bool appends v as one byte.
func (e *Encoder) Bool(v bool) {
	b := byte(0)
	if v {
		b = 1
	}
	e.buf = append(e.buf, b)
}

// Str appends a length-prefixed string.
func (e *Encoder) Str(s string) {
	e.U64(uint64(len(s)))
	e.buf = append(e.buf, s...)
	e.pace()
}

// Blob appends a length-prefixed byte slice.
func (e *Encoder) Blob(b []byte) {
	e.U64(uint64(len(b)))
	e.buf = append(e.buf, b...)
	e.pace()
}

// Len appends the length of a collection (maps, slices of records).
func (e *Encoder) Len(n int) { e.U64(uint64(n)) }

// F64s appends a float slice, nil kept apart from empty.
func (e *Encoder) F64s(v []float64) {
	e.Bool(v != nil)
	e.Len(len(v))
	for _, x := range v {
		e.F64(x)
	}
}

// Ints appends an int slice, nil kept apart from empty.
func (e *Encoder) Ints(v []int) {
	e.Bool(v != nil)
	e.Len(len(v))
	for _, x := range v {
		e.Int(x)
	}
}

// Strs appends a string slice, nil kept apart from empty.
func (e *Encoder) Strs(v []string) {
	e.Bool(v != nil)
	e.Len(len(v))
	for _, x := range v {
		e.Str(x)
	}
}

// Decoder reads values written by an Encoder. The first error sticks.
type Decoder struct {
	buf []byte
	err error
}

// NewDecoder reads b.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// Err is the first error, or nil.
func (d *Decoder) Err() error { return d.err }

// Left is the number of bytes not read yet.
func (d *Decoder) Left() int { return len(d.buf) }

// Fail records err (the first one sticks) and stops decoding.
func (d *Decoder) Fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.buf = nil
}

// Failf records a formatted error.
func (d *Decoder) Failf(format string, args ...any) { d.Fail(fmt.Errorf(format, args...)) }

// End fails unless every byte was read.
func (d *Decoder) End() error {
	if d.err == nil && len(d.buf) > 0 {
		d.err = fmt.Errorf("wire: %d trailing bytes", len(d.buf))
	}
	return d.err
}

// U64 reads a uint64.
func (d *Decoder) U64() uint64 {
	if len(d.buf) < 8 {
		d.Fail(ErrShort)
		return 0
	}
	v := binary.LittleEndian.Uint64(d.buf)
	d.buf = d.buf[8:]
	return v
}

// I64 reads an int64.
func (d *Decoder) I64() int64 { return int64(d.U64()) }

// Int reads an int that must fit the platform's int.
func (d *Decoder) Int() int {
	v := d.I64()
	if int64(int(v)) != v {
		d.Failf("wire: integer %d out of range", v)
		return 0
	}
	return int(v)
}

// IntIn reads an int in [lo, hi].
func (d *Decoder) IntIn(lo, hi int) int {
	v := d.Int()
	if d.err == nil && (v < lo || v > hi) {
		d.Failf("wire: integer %d out of range [%d, %d]", v, lo, hi)
		return 0
	}
	return v
}

// F64 reads a float64 bit pattern.
func (d *Decoder) F64() float64 { return math.Float64frombits(d.U64()) }

// Bool reads one byte that must be 0 or 1.
func (d *Decoder) Bool() bool {
	if len(d.buf) < 1 {
		d.Fail(ErrShort)
		return false
	}
	b := d.buf[0]
	d.buf = d.buf[1:]
	if b > 1 {
		d.Failf("wire: boolean byte %d", b)
		return false
	}
	return b == 1
}

// Len reads a collection length whose elements take at least size bytes
// each, and fails when the input cannot hold that many.
func (d *Decoder) Len(size int) int {
	n := d.U64()
	if d.err != nil {
		return 0
	}
	if size < 1 {
		size = 1
	}
	if n > uint64(len(d.buf)/size) {
		d.Failf("wire: length %d exceeds the %d bytes left", n, len(d.buf))
		return 0
	}
	return int(n)
}

// Str reads a length-prefixed string.
func (d *Decoder) Str() string {
	n := d.Len(1)
	if d.err != nil {
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

// Blob reads a length-prefixed byte slice (a copy).
func (d *Decoder) Blob() []byte {
	n := d.Len(1)
	if d.err != nil {
		return nil
	}
	b := append([]byte(nil), d.buf[:n]...)
	d.buf = d.buf[n:]
	return b
}

// F64s reads a float slice.
func (d *Decoder) F64s() []float64 {
	present := d.Bool()
	n := d.Len(8)
	if d.err != nil || !present {
		return nil
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = d.F64()
	}
	return v
}

// Ints reads an int slice.
func (d *Decoder) Ints() []int {
	present := d.Bool()
	n := d.Len(8)
	if d.err != nil || !present {
		return nil
	}
	v := make([]int, n)
	for i := range v {
		v[i] = d.Int()
	}
	return v
}

// Strs reads a string slice.
func (d *Decoder) Strs() []string {
	present := d.Bool()
	n := d.Len(8)
	if d.err != nil || !present {
		return nil
	}
	v := make([]string, n)
	for i := range v {
		v[i] = d.Str()
	}
	return v
}
