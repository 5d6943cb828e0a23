package market

import (
	"math"
	"math/rand/v2"
	"testing"
)

// concaveByPAV is concaveMarginals without its shortcut for increments
// that already do not increase: pool-adjacent-violators, then the pass
// that removes rounding's increases.
func concaveByPAV(d []float64) {
	var blocks []block
	for _, v := range d {
		blocks = append(blocks, block{v, 1})
		for len(blocks) > 1 {
			a, b := blocks[len(blocks)-2], blocks[len(blocks)-1]
			if a.sum*float64(b.cnt) >= b.sum*float64(a.cnt) {
				break
			}
			blocks = blocks[:len(blocks)-1]
			blocks[len(blocks)-1] = block{a.sum + b.sum, a.cnt + b.cnt}
		}
	}
	t := 0
	for _, b := range blocks {
		for k := 0; k < b.cnt; k++ {
			d[t] = b.sum / float64(b.cnt)
			t++
		}
	}
	for t := 1; t < len(d); t++ {
		d[t] = min(d[t], d[t-1])
	}
}

// TestConcaveMarginals_EqualsPoolAdjacentViolators compares the slopes of
// concaveMarginals bit for bit (the sign of zero included) with the full
// pool-adjacent-violators on random increments, half of them already
// nonincreasing, with runs of equal values and of ±0.
func TestConcaveMarginals_EqualsPoolAdjacentViolators(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 5))
	negZero := math.Copysign(0, -1)
	var scratch []block
	for trial := range 5000 {
		d := make([]float64, rng.IntN(40))
		for i := range d {
			switch rng.IntN(6) {
			case 0:
				d[i] = 0
			case 1:
				d[i] = negZero
			case 2:
				if i > 0 {
					d[i] = d[i-1]
				}
			default:
				d[i] = rng.NormFloat64()
			}
		}
		if trial%2 == 0 { // nonincreasing, keeping the zeros' signs
			for i := 1; i < len(d); i++ {
				if d[i] > d[i-1] {
					d[i] = d[i-1] - rng.Float64()
				}
			}
		}
		got, want := append([]float64(nil), d...), append([]float64(nil), d...)
		concaveMarginals(got, &scratch)
		concaveByPAV(want)
		for i := range got {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
				t.Fatalf("trial %d: slope %d is %v, want %v (increments %v)", trial, i, got[i], want[i], d)
			}
		}
	}
}
