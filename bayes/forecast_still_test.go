package bayes

import (
	"math"
	"math/rand/v2"
	"testing"
)

// stillEpochsLoop is forecastRaw's loop over epochs from..E−1 when every
// epoch step is skipped, as it was written before stillEpochs: epoch by
// epoch, every level in turn.
func stillEpochsLoop(m *moments, N, dur *[maxLevels]float64, L, from, E int, pTotal float64) {
	P, A, B := &m.P, &m.A, &m.B
	for e := from; e < E; e++ {
		w := 1.0
		if float64(e+1) > pTotal {
			w = pTotal - float64(e)
		}
		if w < 0 {
			w = 0
		}
		for i := range L {
			if P[i] == 0 {
				continue
			}
			x := w * dur[i]
			B[i] += 2*x*A[i] + x*x*P[i]
			A[i] += x * P[i]
			N[i] += w * P[i]
		}
	}
}

// TestForecast_StillEpochsKeepTheLoopsBits: on random moments, durations,
// levels (some empty), epoch ranges and fractional totals (the last epochs
// partial or beyond the total), stillEpochs leaves every moment and count
// with the bits of the epoch-by-epoch loop; a run of more than
// exactEpochs whole epochs, summed in closed form, with its value up to
// rounding (relative 1e-10: the loop rounds at every epoch).
func TestForecast_StillEpochsKeepTheLoopsBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 5))
	long := 0
	for trial := range 20000 {
		L := 1 + rng.IntN(maxLevels)
		var m moments
		var N, dur [maxLevels]float64
		for i := range L {
			if rng.IntN(4) > 0 {
				m.P[i] = rng.Float64()
				m.A[i] = 1e4 * rng.Float64() * m.P[i]
				m.B[i] = m.A[i] * m.A[i] * (1 + rng.Float64())
				N[i] = 100 * rng.Float64()
			}
			dur[i] = math.Exp(10 * rng.Float64())
		}
		E := 1 + rng.IntN(3000)
		from := rng.IntN(E + 1)
		if trial%50 == 0 { // long enough to be summed
			E, from = exactEpochs+3000+rng.IntN(3000), rng.IntN(3000)
		}
		pTotal := float64(E) - 3*rng.Float64()
		if rng.IntN(3) == 0 {
			pTotal = float64(E)
		}
		a, an := m, N
		b, bn := m, N
		stillEpochs(&a, &an, &dur, L, from, E, pTotal)
		stillEpochsLoop(&b, &bn, &dur, L, from, E, pTotal)
		summed := wholeEpochs(from, E, pTotal) > exactEpochs
		if summed {
			long++
		}
		for i := range maxLevels {
			for _, c := range [][2]float64{{a.P[i], b.P[i]}, {a.A[i], b.A[i]}, {a.B[i], b.B[i]}, {an[i], bn[i]}} {
				if summed && math.Abs(c[0]-c[1]) <= 1e-10*math.Abs(c[1]) {
					continue // summed in closed form: the loop's value up to rounding
				}
				if math.Float64bits(c[0]) != math.Float64bits(c[1]) {
					t.Fatalf("trial %d (L=%d, epochs %d..%d, total %v): level %d: %v, the loop %v", trial, L, from, E, pTotal, i, c[0], c[1])
				}
			}
		}
	}
	if long < 100 {
		t.Fatalf("only %d trials summed more than %d epochs", long, exactEpochs)
	}
}

// BenchmarkForecast_StillEpochs: 640 epochs of one level, the live load
// test's job (bayes.stillEpochs against the epoch-by-epoch loop).
func BenchmarkForecast_StillEpochs(b *testing.B) {
	dur := [maxLevels]float64{156}
	for _, c := range []struct {
		name string
		f    func(*moments, *[maxLevels]float64, *[maxLevels]float64, int, int, int, float64)
	}{{"still", stillEpochs}, {"loop", stillEpochsLoop}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				m := moments{}
				m.P[0] = 1
				var N [maxLevels]float64
				c.f(&m, &N, &dur, 1, 1, 640, 639.5)
			}
		})
	}
}

// TestForecast_StillMemoAnswersOnlyRepeatedCalls: a sequence of still
// tails through one memo, each either a repeat of an earlier call or one
// with a single input moved (a level's probability, moment, count or
// duration by one ulp or to ±0, a level emptied or filled, the range, the
// total), leaves every moment and count with the bits of stillEpochs
// called afresh.
func TestForecast_StillMemoAnswersOnlyRepeatedCalls(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 11))
	type call struct {
		m       moments
		N, dur  [maxLevels]float64
		L, from int
		E       int
		pTotal  float64
	}
	var memo *stillMemo
	var calls []call
	hits := 0
	for trial := range 20000 {
		var c call
		if len(calls) > 0 && rng.IntN(4) > 0 {
			c = calls[len(calls)-1] // the remembered call, or an earlier one
			if rng.IntN(4) == 0 {
				c = calls[rng.IntN(len(calls))]
			}
			i := rng.IntN(c.L)
			switch rng.IntN(12) {
			case 0:
				c.m.P[i] = math.Nextafter(c.m.P[i], 2)
			case 1:
				c.m.A[i] = math.Nextafter(c.m.A[i], 0)
			case 2:
				c.m.B[i] = math.Nextafter(c.m.B[i], math.Inf(1))
			case 3:
				c.N[i] = math.Copysign(0, -1)
			case 4:
				c.dur[i] = math.Nextafter(c.dur[i], 0)
			case 5:
				c.m.P[i] = 0
			case 6:
				c.m.P[i] = 0.5
			case 7:
				c.from = max(0, c.from-1)
			case 8:
				c.pTotal = math.Nextafter(c.pTotal, 0)
			case 9:
				c.E++
			}
		} else {
			c.L = 1 + rng.IntN(4)
			for i := range c.L {
				if rng.IntN(3) > 0 {
					c.m.P[i] = rng.Float64()
					c.m.A[i] = 1e4 * rng.Float64() * c.m.P[i]
					c.m.B[i] = c.m.A[i] * c.m.A[i] * (1 + rng.Float64())
					c.N[i] = 100 * rng.Float64()
				}
				c.dur[i] = math.Exp(10 * rng.Float64())
			}
			c.E = 1 + rng.IntN(700)
			c.from = rng.IntN(c.E + 1)
			c.pTotal = float64(c.E) - 3*rng.Float64()
		}
		calls = append(calls, c)
		before := memo != nil && memo.from == c.from && memo.E == c.E && memo.pTotal == math.Float64bits(c.pTotal) && memo.repeats(&c.m, &c.N, &c.dur, c.L)
		if before {
			hits++
		}
		a, an := c.m, c.N
		b, bn := c.m, c.N
		stillEpochsMemo(&memo, &a, &an, &c.dur, c.L, c.from, c.E, c.pTotal)
		stillEpochs(&b, &bn, &c.dur, c.L, c.from, c.E, c.pTotal)
		for i := range maxLevels {
			for _, v := range [][2]float64{{a.P[i], b.P[i]}, {a.A[i], b.A[i]}, {a.B[i], b.B[i]}, {an[i], bn[i]}} {
				if math.Float64bits(v[0]) != math.Float64bits(v[1]) {
					t.Fatalf("trial %d (memo hit %v): level %d: %v, afresh %v", trial, before, i, v[0], v[1])
				}
			}
		}
	}
	if hits < 1000 {
		t.Fatalf("only %d of 20000 calls repeated the remembered one: the memo is not exercised", hits)
	}
}
