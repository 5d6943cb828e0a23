package pollux

import (
	"math"
	"slices"
)

// run is NSGA-II as pymoo 0.4.2 runs it for Pollux (spec §6.1): the initial
// states repaired, de-duplicated and evaluated; then per generation up to
// PopSize offspring by binary tournament (dominance, then crowding),
// one-point crossover over jobs (p = 0.9), mutation, repair and duplicate
// elimination; rank-and-crowding survival. It returns the final first front.
func (g *ga) run(init [][]int8) [][]int8 {
	var pop []indiv
	for _, x := range init {
		g.repair(x)
		h := hashState(x)
		if isDup(x, h, pop) {
			continue
		}
		in := indiv{x: x, hash: h}
		g.evaluate(&in)
		pop = append(pop, in)
	}
	pop = g.survive(pop, len(pop))
	for gen := 1; gen < g.p.Generations; gen++ {
		off := g.mate(pop, g.p.PopSize)
		pop = g.survive(append(pop, off...), g.p.PopSize)
	}
	var front [][]int8
	for i := range pop {
		if pop[i].rank == 0 {
			front = append(front, pop[i].x)
		}
	}
	return front
}

// dominates reports whether a Pareto-dominates b (both minimised).
func dominates(a, b *[2]float64) bool {
	return a[0] <= b[0] && a[1] <= b[1] && (a[0] < b[0] || a[1] < b[1])
}

// mate produces up to n new, distinct offspring.
func (g *ga) mate(pop []indiv, n int) []indiv {
	var off []indiv
	rng := g.p.rng
	for tries := 0; len(off) < n && tries <= 100; tries++ {
		pairs := (n - len(off) + 1) / 2
		par := g.tournament(pop, 2*pairs)
		var batch []indiv
		for k := 0; k < pairs; k++ {
			a, b := pop[par[2*k]].x, pop[par[2*k+1]].x
			c0, c1 := slices.Clone(a), slices.Clone(b)
			if rng.Float64() < 0.9 {
				cut := rng.IntN(g.nj) * g.nn
				copy(c0[:cut], b[:cut])
				copy(c1[:cut], a[:cut])
			}
			for _, c := range [][]int8{c0, c1} {
				g.mutate(c)
				g.repair(c)
				h := hashState(c)
				if isDup(c, h, pop, off, batch) {
					continue
				}
				batch = append(batch, indiv{x: c, hash: h})
			}
		}
		if len(off)+len(batch) > n {
			batch = batch[:n-len(off)]
		}
		for i := range batch {
			g.evaluate(&batch[i])
		}
		off = append(off, batch...)
	}
	return off
}

// tournament returns k winners of binary tournaments over random
// permutations of the population.
func (g *ga) tournament(pop []indiv, k int) []int {
	rng := g.p.rng
	cand := make([]int, 0, 2*k+len(pop))
	for len(cand) < 2*k {
		cand = append(cand, rng.Perm(len(pop))...)
	}
	out := make([]int, k)
	for i := range out {
		a, b := cand[2*i], cand[2*i+1]
		switch {
		case dominates(&pop[a].f, &pop[b].f):
			out[i] = a
		case dominates(&pop[b].f, &pop[a].f):
			out[i] = b
		case pop[a].crowd > pop[b].crowd:
			out[i] = a
		case pop[b].crowd > pop[a].crowd:
			out[i] = b
		case rng.IntN(2) == 0:
			out[i] = a
		default:
			out[i] = b
		}
	}
	return out
}

// survive keeps n states by non-dominated rank, then crowding distance
// (largest first, random ties) within the front that does not fit.
func (g *ga) survive(pop []indiv, n int) []indiv {
	fronts := sortFronts(pop)
	out := make([]indiv, 0, n)
	for r, f := range fronts {
		crowding(pop, f)
		for _, i := range f {
			pop[i].rank = r
		}
		if len(out)+len(f) > n {
			rng := g.p.rng
			key := make([]float64, len(pop))
			for _, i := range f {
				key[i] = rng.Float64()
			}
			slices.SortFunc(f, func(a, b int) int {
				if c := cmpF(pop[b].crowd, pop[a].crowd); c != 0 {
					return c
				}
				return cmpF(key[a], key[b])
			})
			f = f[:n-len(out)]
		}
		for _, i := range f {
			out = append(out, pop[i])
		}
		if len(out) == n {
			break
		}
	}
	return out
}

// sortFronts is the non-dominated sort of two objectives by a sweep in
// (F0, F1) order.
func sortFronts(pop []indiv) [][]int {
	idx := make([]int, len(pop))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if c := cmpF(pop[a].f[0], pop[b].f[0]); c != 0 {
			return c
		}
		return cmpF(pop[a].f[1], pop[b].f[1])
	})
	var fronts [][]int
	var minF1, minF0 []float64 // per front: smallest F1, smallest F0 among those at it
	for _, i := range idx {
		f := pop[i].f
		k := 0
		for ; k < len(fronts); k++ {
			if !(minF1[k] < f[1] || minF1[k] == f[1] && minF0[k] < f[0]) {
				break
			}
		}
		if k == len(fronts) {
			fronts = append(fronts, nil)
			minF1 = append(minF1, math.Inf(1))
			minF0 = append(minF0, math.Inf(1))
		}
		fronts[k] = append(fronts[k], i)
		if f[1] < minF1[k] {
			minF1[k], minF0[k] = f[1], f[0]
		}
	}
	return fronts
}

// crowding sets the crowding distance of one front as pymoo computes it:
// infinite at the extremes and for fronts of two or fewer, zero for
// duplicates in objective space.
func crowding(pop []indiv, f []int) {
	if len(f) <= 2 {
		for _, i := range f {
			pop[i].crowd = math.Inf(1)
		}
		return
	}
	var uniq []int
	for _, i := range f {
		pop[i].crowd = 0
		dup := false
		for _, u := range uniq {
			if pop[u].f == pop[i].f {
				dup = true
				break
			}
		}
		if !dup {
			uniq = append(uniq, i)
		}
	}
	if len(uniq) <= 2 {
		for _, i := range uniq {
			pop[i].crowd = math.Inf(1)
		}
		return
	}
	for m := 0; m < 2; m++ {
		s := slices.Clone(uniq)
		slices.SortStableFunc(s, func(a, b int) int { return cmpF(pop[a].f[m], pop[b].f[m]) })
		lo, hi := pop[s[0]].f[m], pop[s[len(s)-1]].f[m]
		norm := hi - lo
		for k, i := range s {
			if k == 0 || k == len(s)-1 {
				pop[i].crowd = math.Inf(1)
				continue
			}
			if norm > 0 {
				pop[i].crowd += (pop[s[k+1]].f[m] - pop[s[k-1]].f[m]) / norm / 2
			}
		}
	}
}
