package pollux

import (
	"math"
	"slices"
)

// nsga holds the reusable buffers of the genetic algorithm, so that a run
// allocates little once warm.
type nsga struct {
	spare    [][]int8 // state buffers not in use
	popA     []indiv
	popB     []indiv
	merged   []indiv
	cand     []int
	winners  []int
	batch    []indiv
	off      []indiv
	key      []float64
	idx      []int
	fronts   [][]int
	minF     [][2]float64
	uniq, s  []int
	children [2][]int8
}

func (g *ga) newState() []int8 {
	n := len(g.nsga.spare)
	if n == 0 {
		return make([]int8, g.nj*g.nn)
	}
	x := g.nsga.spare[n-1]
	g.nsga.spare = g.nsga.spare[:n-1]
	return x[:g.nj*g.nn]
}

func (g *ga) freeState(x []int8) { g.nsga.spare = append(g.nsga.spare, x) }

// run is NSGA-II as pymoo 0.4.2 runs it for Pollux (spec §6.1): the initial
// states repaired, de-duplicated and evaluated; then per generation up to
// PopSize offspring by binary tournament (dominance, then crowding),
// one-point crossover over jobs (p = 0.9), mutation, repair and duplicate
// elimination; rank-and-crowding survival. It returns the final first front
// (fresh slices that the caller owns).
func (g *ga) run(init [][]int8) [][]int8 {
	b := &g.nsga
	b.spare = b.spare[:0]
	merged := b.merged[:0]
	for _, x := range init {
		g.repair(x)
		h := hashState(x)
		if isDup(x, h, merged) {
			continue
		}
		in := indiv{x: x, hash: h}
		g.evaluate(&in)
		merged = append(merged, in)
	}
	bufs := [2][]indiv{b.popA, b.popB}
	cur := 0
	pop := g.survive(merged, len(merged), bufs[cur][:0])
	bufs[cur] = pop
	for gen := 1; gen < g.p.Generations; gen++ {
		off := g.mate(pop, g.p.PopSize)
		merged = append(merged[:0], pop...)
		merged = append(merged, off...)
		cur = 1 - cur
		pop = g.survive(merged, g.p.PopSize, bufs[cur][:0])
		bufs[cur] = pop
	}
	b.popA, b.popB, b.merged = bufs[0], bufs[1], merged
	var front [][]int8
	for i := range pop {
		if pop[i].rank == 0 {
			front = append(front, slices.Clone(pop[i].x))
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
	b := &g.nsga
	off := b.off[:0]
	rng := g.p.rng
	for tries := 0; len(off) < n && tries <= 100; tries++ {
		pairs := (n - len(off) + 1) / 2
		par := g.tournament(pop, 2*pairs)
		batch := b.batch[:0]
		for k := 0; k < pairs; k++ {
			pa, pb := pop[par[2*k]].x, pop[par[2*k+1]].x
			c0, c1 := g.newState(), g.newState()
			copy(c0, pa)
			copy(c1, pb)
			if rng.Float64() < 0.9 {
				cut := rng.IntN(g.nj) * g.nn
				copy(c0[:cut], pb[:cut])
				copy(c1[:cut], pa[:cut])
			}
			b.children = [2][]int8{c0, c1}
			for _, c := range b.children {
				g.mutate(c)
				g.repair(c)
				h := hashState(c)
				if isDup(c, h, pop, off, batch) {
					g.freeState(c)
					continue
				}
				batch = append(batch, indiv{x: c, hash: h})
			}
		}
		if len(off)+len(batch) > n {
			for _, in := range batch[n-len(off):] {
				g.freeState(in.x)
			}
			batch = batch[:n-len(off)]
		}
		for i := range batch {
			g.evaluate(&batch[i])
		}
		off = append(off, batch...)
		b.batch = batch
	}
	b.off = off
	return off
}

// tournament returns k winners of binary tournaments over random
// permutations of the population.
func (g *ga) tournament(pop []indiv, k int) []int {
	rng := g.p.rng
	b := &g.nsga
	cand := b.cand[:0]
	for len(cand) < 2*k {
		start := len(cand)
		for i := range pop {
			cand = append(cand, i)
		}
		p := cand[start:]
		for i := len(p) - 1; i > 0; i-- {
			m := rng.IntN(i + 1)
			p[i], p[m] = p[m], p[i]
		}
	}
	b.cand = cand
	out := b.winners[:0]
	for i := 0; i < k; i++ {
		a, c := cand[2*i], cand[2*i+1]
		w := a
		switch {
		case dominates(&pop[a].f, &pop[c].f):
		case dominates(&pop[c].f, &pop[a].f):
			w = c
		case pop[a].crowd > pop[c].crowd:
		case pop[c].crowd > pop[a].crowd:
			w = c
		case rng.IntN(2) != 0:
			w = c
		}
		out = append(out, w)
	}
	b.winners = out
	return out
}

// survive keeps n states of pop into dst by non-dominated rank, then
// crowding distance (largest first, random ties) within the front that does
// not fit; the states dropped return to the spare pool.
func (g *ga) survive(pop []indiv, n int, dst []indiv) []indiv {
	b := &g.nsga
	fronts := g.sortFronts(pop)
	out := dst[:0]
	keep := make([]bool, len(pop))
	for r, f := range fronts {
		if len(out) == n {
			break
		}
		crowding(pop, f, b)
		for _, i := range f {
			pop[i].rank = r
		}
		if len(out)+len(f) > n {
			rng := g.p.rng
			if cap(b.key) < len(pop) {
				b.key = make([]float64, len(pop))
			}
			key := b.key[:len(pop)]
			for _, i := range f {
				key[i] = rng.Float64()
			}
			slices.SortFunc(f, func(a, c int) int {
				if d := cmpF(pop[c].crowd, pop[a].crowd); d != 0 {
					return d
				}
				return cmpF(key[a], key[c])
			})
			f = f[:n-len(out)]
		}
		for _, i := range f {
			out = append(out, pop[i])
			keep[i] = true
		}
	}
	for i := range pop {
		if !keep[i] {
			g.freeState(pop[i].x)
		}
	}
	return out
}

// sortFronts is the non-dominated sort of two objectives by a sweep in
// (F0, F1) order.
func (g *ga) sortFronts(pop []indiv) [][]int {
	b := &g.nsga
	idx := b.idx[:0]
	for i := range pop {
		idx = append(idx, i)
	}
	b.idx = idx
	slices.SortStableFunc(idx, func(a, c int) int {
		if d := cmpF(pop[a].f[0], pop[c].f[0]); d != 0 {
			return d
		}
		return cmpF(pop[a].f[1], pop[c].f[1])
	})
	fronts := b.fronts[:0]
	minF := b.minF[:0] // per front: smallest F1, and the smallest F0 at it
	for _, i := range idx {
		f := pop[i].f
		k := 0
		for ; k < len(fronts); k++ {
			if !(minF[k][1] < f[1] || minF[k][1] == f[1] && minF[k][0] < f[0]) {
				break
			}
		}
		if k == len(fronts) {
			if len(fronts) < cap(fronts) {
				fronts = fronts[:k+1]
				fronts[k] = fronts[k][:0]
			} else {
				fronts = append(fronts, nil)
			}
			minF = append(minF, [2]float64{math.Inf(1), math.Inf(1)})
		}
		fronts[k] = append(fronts[k], i)
		if f[1] < minF[k][1] {
			minF[k] = [2]float64{f[0], f[1]}
		}
	}
	b.fronts, b.minF = fronts, minF
	return fronts
}

// crowding sets the crowding distance of one front as pymoo computes it:
// infinite at the extremes and for fronts of two or fewer, zero for
// duplicates in objective space.
func crowding(pop []indiv, f []int, b *nsga) {
	if len(f) <= 2 {
		for _, i := range f {
			pop[i].crowd = math.Inf(1)
		}
		return
	}
	uniq := b.uniq[:0]
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
	b.uniq = uniq
	if len(uniq) <= 2 {
		for _, i := range uniq {
			pop[i].crowd = math.Inf(1)
		}
		return
	}
	for m := 0; m < 2; m++ {
		s := append(b.s[:0], uniq...)
		b.s = s
		slices.SortStableFunc(s, func(a, c int) int { return cmpF(pop[a].f[m], pop[c].f[m]) })
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
