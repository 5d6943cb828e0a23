package pollux

import "math/bits"

// rng is wyrand (Wang Yi's 64-bit generator): small, fast and good enough
// for the genetic algorithm's draws. Seeded explicitly; never global.
type rng struct{ s uint64 }

func newRNG(seed uint64) *rng { return &rng{s: seed ^ 0x2d358dccaa6c78a5} }

func (r *rng) next() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// Float64 is uniform in [0, 1).
func (r *rng) Float64() float64 { return float64(r.next()>>11) / (1 << 53) }

// IntN is uniform in [0, n) (Lemire's multiply-shift; n > 0).
func (r *rng) IntN(n int) int {
	hi, lo := bits.Mul64(r.next(), uint64(n))
	if lo < uint64(n) {
		thresh := -uint64(n) % uint64(n)
		for lo < thresh {
			hi, lo = bits.Mul64(r.next(), uint64(n))
		}
	}
	return int(hi)
}
