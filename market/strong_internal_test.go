package market

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestStrong_BoundsEveryPackableAllocation checks the validity of the
// profile relaxation against exhaustive enumeration: on small chain-width
// instances with random round bounds, its value is at least the utility of
// every allocation that packs (decided by exhaustive search), and it calls
// a region infeasible only if nothing in it packs.
func TestStrong_BoundsEveryPackableAllocation(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	chain := []int{1, 2, 4, 8}
	tight, trials := 0, 300
	for trial := 0; trial < trials; trial++ {
		G := []int{4, 6, 8, 12, 16}[rng.IntN(5)]
		T := 2 + rng.IntN(4)
		N := 2 + rng.IntN(4)
		p := Problem{GPUs: G, Rounds: T, Round: 5}
		for i := 0; i < N; i++ {
			w := chain[rng.IntN(4)]
			for w > G {
				w /= 2
			}
			E := float64(1 + rng.IntN(12))
			p.Jobs = append(p.Jobs, Job{ID: fmt.Sprint(i), Workers: w, Epochs: E,
				Progress: float64(rng.IntN(int(E))), EpochSeconds: 30 + 300*rng.Float64(),
				Remaining: 1000, FairFinish: 1e9})
		}
		s := DefaultSettings()
		in := newInstance(&p, s)
		weights := make([]float64, N)
		for c := range weights {
			weights[c] = 1 / float64(N*T)
		}
		m := newModel(in, weights, false)
		lo, hi := make([]int, N), make([]int, N)
		for c := range lo {
			hi[c] = m.jobs[c].hi
			if rng.IntN(3) == 0 && hi[c] > 0 {
				lo[c] = rng.IntN(hi[c] + 1)
			}
		}
		sx, pk := newStrongRelaxer(m), newPacker(m)
		n := make([]int, N)
		v, ok, done := sx.solve(lo, hi, n)
		if !done {
			t.Fatalf("trial %d: budget ran out on a tiny instance", trial)
		}
		best, any := negInf, false
		cur := append([]int(nil), lo...)
		var walk func(c int)
		walk = func(c int) {
			if c == N {
				if packs, proven := pk.exact(cur); packs && proven {
					any = true
					best = max(best, m.utilityOf(cur))
				}
				return
			}
			for k := lo[c]; k <= hi[c]; k++ {
				cur[c] = k
				walk(c + 1)
			}
		}
		walk(0)
		if any && !ok {
			t.Fatalf("trial %d: relaxation says infeasible, but an allocation packs", trial)
		}
		if ok && any && m.base+v < best-1e-12 {
			t.Fatalf("trial %d: bound %.15g below the packable optimum %.15g\n%+v lo %v hi %v", trial, m.base+v, best, p, lo, hi)
		}
		pn := make([]int, N)
		pv, pok := newRelaxer(m).solve(lo, hi, pn)
		if any && (!pok || m.base+pv < best-1e-12) {
			t.Fatalf("trial %d: class relaxation %v (ok %v) below the packable optimum %v", trial, m.base+pv, pok, best)
		}
		if ok && any && m.base+v-best < 1e-12 {
			tight++
		}
	}
	t.Logf("profile bound tight on %d of %d", tight, trials)
}
