package market

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// pwlMarginalsFromZero is pwlMarginals as first written: the segment of
// every step searched from the first breakpoint.
func (in *instance) pwlMarginalsFromZero(j *Job, a float64, p, out []float64) []float64 {
	f := &in.f
	step := in.delta / (j.EpochSeconds * j.Epochs)
	for n := range out {
		u0 := (j.Progress + p[n]) / j.Epochs
		length := step
		if n+1 == len(out) && p[n+1] >= j.Epochs-j.Progress {
			length = max(0, 1-u0)
		}
		seg := 0
		for seg+2 < len(f.b) && u0 >= f.b[seg+1] {
			seg++
		}
		slope := (f.l[seg+1] - f.l[seg]) / (f.b[seg+1] - f.b[seg])
		if u0+length <= f.b[seg+1] || seg+2 == len(f.b) {
			out[n] = a * (slope * length)
			continue
		}
		gain := 0.0
		for lo, rest := u0, length; rest > 0 && seg+1 < len(f.b); seg++ {
			part := min(rest, f.b[seg+1]-lo)
			gain += (f.l[seg+1] - f.l[seg]) / (f.b[seg+1] - f.b[seg]) * part
			lo, rest = f.b[seg+1], rest-part
		}
		out[n] = a * gain
	}
	return out
}

// TestJobModel_CurvesAsASearchFromTheFirstSegment checks that carrying
// the utility's segment from one round to the next (atFrom, and the
// search in pwlMarginals) gives every job's utility curve and slopes bit
// for bit as searching from the first breakpoint at every round, on
// random jobs, breakpoints (default and random) and both utilities.
func TestJobModel_CurvesAsASearchFromTheFirstSegment(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 6))
	var scratch []block
	for trial := range 300 {
		p := Problem{GPUs: 1 + rng.IntN(32), Round: rng.IntN(100), Rounds: 1 + rng.IntN(60)}
		for i := range 1 + rng.IntN(30) {
			e := float64(1 + rng.IntN(100))
			d := 10 + 500*rng.Float64()
			p.Jobs = append(p.Jobs, Job{ID: fmt.Sprint(i), Workers: 1 + rng.IntN(min(p.GPUs, 8)), Epochs: e,
				Progress: e * rng.Float64(), EpochSeconds: d, Remaining: d * e * rng.Float64(), FairFinish: 1e4})
		}
		s := DefaultSettings()
		s.ExactLog = trial%5 == 0
		if trial%2 == 1 {
			b := []float64{0, 1}
			for range rng.IntN(12) {
				b = append(b, rng.Float64())
			}
			slices.Sort(b)
			s.Breakpoints = slices.Compact(b)
			s.Origin = s.Breakpoints[1] * rng.Float64()
			if s.Origin == 0 {
				s.Origin = s.Breakpoints[1] / 2
			}
		}
		in := newInstance(&p, s)
		var mem slab
		for c := range in.jobs {
			j, a := &in.jobs[c], 0.5+rng.Float64()
			jm := in.jobModel(j, a, false, &mem)
			g := make([]float64, jm.hi+1)
			for n := range g {
				g[n] = a * in.f.at((j.Progress+jm.p[n])/j.Epochs)
			}
			marg := make([]float64, jm.hi)
			if in.f.exact {
				for n := range marg {
					marg[n] = g[n+1] - g[n]
				}
			} else {
				in.pwlMarginalsFromZero(j, a, jm.p, marg)
			}
			concaveMarginals(marg, &scratch)
			if !slices.Equal(bitsOf(jm.g), bitsOf(g)) || !slices.Equal(bitsOf(jm.marg), bitsOf(marg)) {
				t.Fatalf("trial %d, job %d: curve %v / slopes %v, want %v / %v", trial, c, jm.g, jm.marg, g, marg)
			}
		}
	}
}

func bitsOf(v []float64) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = math.Float64bits(x)
	}
	return out
}
