package wire

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func TestWire_ValuesRoundTripBitForBit(t *testing.T) {
	var e Encoder
	nan := math.Float64frombits(0x7ff8_0000_dead_beef)
	e.U64(math.MaxUint64)
	e.I64(math.MinInt64)
	e.Int(-7)
	e.F64(nan)
	e.F64(math.Inf(-1))
	e.F64(math.Copysign(0, -1))
	e.Bool(true)
	e.Str("héllo")
	e.Blob([]byte{0, 1, 2})
	e.F64s(nil)
	e.F64s([]float64{})
	e.Ints([]int{3, -4})
	e.Strs([]string{"a", ""})
	d := NewDecoder(e.Bytes())
	if d.U64() != math.MaxUint64 || d.I64() != math.MinInt64 || d.Int() != -7 {
		t.Fatal("integers")
	}
	if math.Float64bits(d.F64()) != math.Float64bits(nan) || !math.IsInf(d.F64(), -1) || !math.Signbit(d.F64()) {
		t.Fatal("floats")
	}
	if !d.Bool() || d.Str() != "héllo" || !slices.Equal(d.Blob(), []byte{0, 1, 2}) {
		t.Fatal("bool, string, blob")
	}
	if v := d.F64s(); v != nil {
		t.Fatalf("nil slice came back as %v", v)
	}
	if v := d.F64s(); v == nil || len(v) != 0 {
		t.Fatalf("empty slice came back as %v", v)
	}
	if !slices.Equal(d.Ints(), []int{3, -4}) || !slices.Equal(d.Strs(), []string{"a", ""}) {
		t.Fatal("slices")
	}
	if err := d.End(); err != nil {
		t.Fatal(err)
	}
}

func TestWire_BadInputFailsWithoutAllocatingItsClaims(t *testing.T) {
	var e Encoder
	e.U64(1 << 60) // a length no input can hold
	for name, read := range map[string]func(*Decoder){
		"string": func(d *Decoder) { d.Str() },
		"floats": func(d *Decoder) { d.F64s() },
		"length": func(d *Decoder) { d.Len(8) },
	} {
		d := NewDecoder(e.Bytes())
		if name == "floats" {
			d = NewDecoder(append([]byte{1}, e.Bytes()...))
		}
		read(d)
		if d.Err() == nil || !strings.Contains(d.Err().Error(), "exceeds") {
			t.Errorf("%s: %v, want a length error", name, d.Err())
		}
	}
	d := NewDecoder([]byte{2})
	if d.Bool(); d.Err() == nil {
		t.Error("a boolean byte 2 was accepted")
	}
	d = NewDecoder([]byte{1, 2, 3})
	if d.U64(); d.Err() != ErrShort {
		t.Errorf("short input: %v", d.Err())
	}
	if d.U64() != 0 || d.Str() != "" || d.Err() != ErrShort {
		t.Error("the first error must stick and later reads return zero values")
	}
	var r Encoder
	r.Int(5)
	r.Int(1)
	d = NewDecoder(r.Bytes())
	if d.IntIn(0, 4); d.Err() == nil {
		t.Error("out-of-range integer accepted")
	}
	d = NewDecoder(r.Bytes())
	d.Int()
	if err := d.End(); err == nil || !strings.Contains(err.Error(), "trailing") {
		t.Errorf("trailing bytes: %v", err)
	}
}

// TestWire_GrowAllocatesOnceAndChangesNoByte: an encoder grown to the
// size of what it then encodes keeps its first buffer, and writes the
// bytes an encoder grown by appends writes.
func TestWire_GrowAllocatesOnceAndChangesNoByte(t *testing.T) {
	encode := func(e *Encoder) {
		for i := range 10_000 {
			e.Str("job-0001")
			e.F64(float64(i) / 3)
			e.Ints([]int{i, i + 1})
		}
	}
	var plain Encoder
	encode(&plain)
	var sized Encoder
	sized.Grow(len(plain.Bytes()))
	first := cap(sized.Bytes())
	encode(&sized)
	if cap(sized.Bytes()) != first {
		t.Errorf("the grown encoder reallocated: capacity %d, then %d", first, cap(sized.Bytes()))
	}
	if string(sized.Bytes()) != string(plain.Bytes()) {
		t.Error("the grown encoder wrote other bytes")
	}
	sized.Grow(0)
	sized.Grow(-1)
}

// TestEncoder_YieldsAsItEncodes: on one processor, a goroutine made
// runnable while an encoder works runs before the encoder has encoded
// two yields' worth, without the encoder blocking on anything.
func TestEncoder_YieldsAsItEncodes(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	go ran.Store(true)
	var e Encoder
	s := strings.Repeat("x", 100)
	for len(e.Bytes()) < 2*yieldBytes && !ran.Load() {
		e.Str(s)
	}
	if !ran.Load() {
		t.Fatalf("the waiting goroutine did not run while %d bytes were encoded", len(e.Bytes()))
	}
}
