package protocol

import (
	"encoding/json"
	"math"
	"strconv"
)

// The readers of typed values for the one-pass decoder. Each reads the
// value at p.i (which key left at a value's first byte) into dst the way
// encoding/json would: null leaves dst alone, a value of another JSON type
// or a number that does not fit is refused (the first such is reported)
// and skipped, and dst is written only with a value that fits.

// numberLit reads the value of a number field: its text and whether it is
// an integer, or ok false for null and values of another type.
func (p *pass) numberLit(prefix string, key []byte, typ string) (lit []byte, integer, ok bool, err error) {
	switch c := p.d[p.i]; {
	case c == '-' || isDigit(c):
		lit, integer, err = p.number()
		return lit, integer, err == nil, err
	case c == 'n':
		return nil, false, false, p.literal()
	case isValueStart(c):
		p.refuseType(prefix, string(key), kindOf(c), typ)
		return nil, false, false, p.skip(key)
	}
	return nil, false, false, p.fail("looking for beginning of value")
}

func (p *pass) intField(dst *int, prefix string, key []byte) error {
	lit, integer, ok, err := p.numberLit(prefix, key, "int")
	if !ok {
		return err
	}
	n, fits := parseInt(lit, integer)
	if !fits || n != int64(int(n)) {
		p.refuseNumber(prefix, key, lit, "int")
		return nil
	}
	*dst = int(n)
	return nil
}

func (p *pass) int64Field(dst *int64, prefix string, key []byte) error {
	lit, integer, ok, err := p.numberLit(prefix, key, "int64")
	if !ok {
		return err
	}
	n, fits := parseInt(lit, integer)
	if !fits {
		p.refuseNumber(prefix, key, lit, "int64")
		return nil
	}
	*dst = n
	return nil
}

func (p *pass) uint64Field(dst *uint64, prefix string, key []byte) error {
	lit, integer, ok, err := p.numberLit(prefix, key, "uint64")
	if !ok {
		return err
	}
	n, fits := parseUint(lit, integer)
	if !fits {
		p.refuseNumber(prefix, key, lit, "uint64")
		return nil
	}
	*dst = n
	return nil
}

func (p *pass) floatField(dst *float64, prefix string, key []byte) error {
	lit, integer, ok, err := p.numberLit(prefix, key, "float64")
	if !ok {
		return err
	}
	f, fits := parseFloat(lit, integer)
	if !fits {
		p.refuseNumber(prefix, key, lit, "float64")
		return nil
	}
	*dst = f
	return nil
}

// stringField reads a string value into dst; a value equal to one of
// known shares that string instead of allocating its own.
func (p *pass) stringField(dst *string, prefix string, key []byte, typ string, known ...string) error {
	switch c := p.d[p.i]; {
	case c == '"':
		start := p.i
		escaped, wide, err := p.str()
		if err != nil {
			return err
		}
		if escaped || wide {
			// encoding/json's unquoting (escapes, invalid UTF-8): rare.
			return json.Unmarshal(p.d[start:p.i], dst)
		}
		raw := p.d[start+1 : p.i-1]
		for _, k := range known {
			if string(raw) == k {
				*dst = k
				return nil
			}
		}
		*dst = string(raw)
		return nil
	case c == 'n':
		return p.literal()
	case isValueStart(c):
		p.refuseType(prefix, string(key), kindOf(c), typ)
		return p.skip(key)
	}
	return p.fail("looking for beginning of value")
}

// parseInt is strconv.ParseInt(lit, 10, 64) for a JSON number, without
// converting it to a string when it is short.
func parseInt(lit []byte, integer bool) (int64, bool) {
	if !integer {
		return 0, false
	}
	digits := lit
	if lit[0] == '-' {
		digits = lit[1:]
	}
	if len(digits) > 18 { // 18 digits cannot overflow
		n, err := strconv.ParseInt(string(lit), 10, 64)
		return n, err == nil
	}
	var n int64
	for _, c := range digits {
		n = n*10 + int64(c-'0')
	}
	if lit[0] == '-' {
		n = -n
	}
	return n, true
}

// parseUint is strconv.ParseUint(lit, 10, 64) for a JSON number.
func parseUint(lit []byte, integer bool) (uint64, bool) {
	if !integer || lit[0] == '-' {
		return 0, false
	}
	if len(lit) > 19 { // 19 digits cannot overflow
		n, err := strconv.ParseUint(string(lit), 10, 64)
		return n, err == nil
	}
	var n uint64
	for _, c := range lit {
		n = n*10 + uint64(c-'0')
	}
	return n, true
}

// parseFloat is strconv.ParseFloat(lit, 64) for a JSON number; integers of
// up to 15 digits (below 2^53, so exact) are converted directly.
func parseFloat(lit []byte, integer bool) (float64, bool) {
	if integer {
		digits := lit
		if lit[0] == '-' {
			digits = lit[1:]
		}
		if len(digits) <= 15 {
			var n uint64
			for _, c := range digits {
				n = n*10 + uint64(c-'0')
			}
			f := float64(n)
			if lit[0] == '-' {
				f = -f
			}
			return f, true
		}
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	return f, err == nil && !math.IsInf(f, 0)
}

// refuseNumber refuses a number that does not fit its field.
func (p *pass) refuseNumber(prefix string, key, lit []byte, typ string) {
	if p.typeErr == nil {
		p.refuseType(prefix, string(key), "number "+string(lit), typ)
	}
}
