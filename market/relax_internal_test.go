package market

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRelax_FlatRangeStepChangesNothing compares the class relaxation with
// and without divide's flat-range step (one evaluation for the states
// whose optional job-rounds are all taken) on random models and bounds:
// the same value and the same round counts, bit for bit.
func TestRelax_FlatRangeStepChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 7))
	stepped := 0
	for trial := range 300 {
		p := Problem{GPUs: 1 + rng.IntN(96), Round: rng.IntN(100), Rounds: 1 + rng.IntN(25)}
		for i := range 1 + rng.IntN(120) {
			e := float64(1 + rng.IntN(60))
			d := 10 + 400*rng.Float64()
			p.Jobs = append(p.Jobs, Job{ID: fmt.Sprint(i), Workers: min(p.GPUs, []int{1, 1, 2, 4, 8}[rng.IntN(5)]),
				Epochs: e, Progress: float64(rng.IntN(int(e))), EpochSeconds: d,
				Remaining: d * e * rng.Float64(), FairFinish: 1 + 1e5*rng.Float64()})
		}
		in := newInstance(&p, DefaultSettings())
		w := make([]float64, len(in.jobs))
		for c := range w {
			w[c] = (0.5 + rng.Float64()) / float64(len(w)*in.T)
		}
		m := newModel(in, w, false)
		lo, hi := make([]int, len(m.jobs)), make([]int, len(m.jobs))
		for c := range m.jobs {
			hi[c] = rng.IntN(m.jobs[c].hi + 1)
			lo[c] = rng.IntN(hi[c] + 1)
			if rng.IntN(2) == 0 {
				lo[c] = 0
			}
		}
		a, b := newRelaxer(m), newRelaxer(m)
		b.plain = true
		na, nb := make([]int, len(lo)), make([]int, len(lo))
		va, oka := a.solve(lo, hi, na)
		vb, okb := b.solve(lo, hi, nb)
		if oka != okb || va != vb || !slices.Equal(na, nb) {
			t.Fatalf("trial %d: with the step %v %v %v, without %v %v %v", trial, va, oka, na, vb, okb, nb)
		}
		if a.mono && len(m.classes) > 1 {
			stepped++
		}
	}
	if stepped == 0 {
		t.Fatalf("the step was never taken")
	}
}
