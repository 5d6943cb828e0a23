package market

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// TestReuseModel_EqualsAFreshModel checks the one warm start of a solve:
// the model the tightest fairness rule builds at its bound ρ* from the
// first model's curves (reuseModel) equals, field by field, a model built
// from scratch at that bound (its bounds apart from the curves it shares
// with the first, which it leaves as they were); and a model with other
// weights is never reused.
func TestReuseModel_EqualsAFreshModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	for trial := range 200 {
		p := Problem{GPUs: 1 + rng.IntN(64), Round: rng.IntN(300), Rounds: 1 + rng.IntN(30)}
		for i := range 1 + rng.IntN(80) {
			e := float64(1 + rng.IntN(100))
			d := 10 + 500*rng.Float64()
			p.Jobs = append(p.Jobs, Job{ID: fmt.Sprint(i), Workers: 1 + rng.IntN(min(p.GPUs, 8)), Epochs: e,
				Progress: float64(rng.IntN(int(e))), EpochSeconds: d, Remaining: d * e * rng.Float64(),
				FairFinish: 1 + 1e5*rng.Float64()})
		}
		s := DefaultSettings()
		s.Fairness = FairnessTightest
		in := newInstance(&p, s)
		w := make([]float64, len(in.jobs))
		for c := range w {
			w[c] = 1 / float64(len(w)*in.T)
		}
		first := newModel(in, w, true)
		first.candidates()
		first.ratioItems()
		firstLo := make([]int, len(first.jobs))
		for c := range firstLo {
			firstLo[c] = first.ftfLo(c)
		}
		in.tight, in.ftfRho = true, s.RhoMax*(1+3*rng.Float64())
		reused := newModel(in, w, true)
		if reused == first {
			t.Fatalf("trial %d: the first model returned as the reused one", trial)
		}
		for c := range firstLo {
			if first.ftfLo(c) != firstLo[c] {
				t.Fatalf("trial %d: reusing the first model changed its bound of job %d", trial, c)
			}
		}
		in.models = nil
		fresh := newModel(in, w, true)
		fresh.candidates()
		fresh.ratioItems()
		// The reused model shares the first's curves and keeps its own
		// bounds apart (model.lo): as a fresh model keeps them, the same.
		flat := *reused
		flat.jobs, flat.lo = slices.Clone(reused.jobs), nil
		for c := range flat.jobs {
			flat.jobs[c].ftfLo = reused.ftfLo(c)
		}
		if !reflect.DeepEqual(&flat, fresh) {
			t.Fatalf("trial %d: reused model differs from a fresh one", trial)
		}
		w2 := append([]float64(nil), w...)
		w2[rng.IntN(len(w2))] *= 2
		if other := newModel(in, w2, true); reflect.DeepEqual(other.jobs, fresh.jobs) {
			t.Fatalf("trial %d: a model with other weights has the same curves", trial)
		}
	}
}
