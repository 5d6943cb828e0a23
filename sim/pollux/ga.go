package pollux

import (
	"math"
	"slices"
)

// indiv is one state of the genetic algorithm: a job×node replica matrix
// (row-major, jobs in priority order), its objectives, rank and crowding.
type indiv struct {
	x     []int8
	f     [2]float64
	hash  uint64
	rank  int
	crowd float64
}

// ga holds one Pollux call's problem (spec §6.1) and reusable scratch.
type ga struct {
	p      *Pollux
	jobs   []*Job
	nj, nn int
	cap    []int
	base   []int8
	maxRep []int
	factor []float64 // restart penalty of a changed row
	share  float64   // dominant share × nodes: scales speedups
	fair   int
	gp     []Goodput
	hasGP  []bool
	baseGP []float64
	memo   [][]float64 // per job: speedup by n*65+r, −1 unknown

	free, perm, cum []int
	nz, sum         []int

	nsga nsga
}

const memoR = 65

func (g *ga) setup(p *Pollux, now int, jobs []*Job, cl *Cluster) {
	g.p, g.jobs, g.nj, g.nn, g.cap = p, jobs, len(jobs), len(cl.Capacity), cl.Capacity
	g.base = make([]int8, g.nj*g.nn)
	g.maxRep = g.maxRep[:0]
	g.factor = g.factor[:0]
	g.gp, g.hasGP, g.baseGP = g.gp[:0], g.hasGP[:0], g.baseGP[:0]
	g.fair = (cl.GPUs + g.nj - 1) / g.nj
	g.share = float64(g.nn) / float64(cl.GPUs)
	for len(g.memo) < g.nj {
		g.memo = append(g.memo, make([]float64, (g.nn+1)*memoR))
	}
	for i, j := range jobs {
		for _, n := range j.Alloc {
			g.base[i*g.nn+n]++
		}
		g.maxRep = append(g.maxRep, polluxMaxReplicas(j))
		age := float64(now - j.Submit)
		restarts := float64(max(j.Restarts, 0))
		g.factor = append(g.factor, math.Max(age-RestartSeconds*restarts, 0)/(age+RestartSeconds))
		if cap(g.memo[i]) < (g.nn+1)*memoR {
			g.memo[i] = make([]float64, (g.nn+1)*memoR)
		}
		g.memo[i] = g.memo[i][:(g.nn+1)*memoR]
		for k := range g.memo[i] {
			g.memo[i][k] = -1
		}
		if j.Perf == nil {
			g.gp = append(g.gp, Goodput{})
			g.hasGP = append(g.hasGP, false)
			g.baseGP = append(g.baseGP, 0)
			continue
		}
		gp := *j.Goodput()
		b, _, _ := gp.Optimize(1, g.fair)
		g.gp = append(g.gp, gp)
		g.hasGP = append(g.hasGP, true)
		g.baseGP = append(g.baseGP, b)
	}
	g.free = make([]int, g.nn)
	g.perm = make([]int, g.nn)
	g.cum = make([]int, g.nn)
	g.nz = make([]int, g.nj)
	g.sum = make([]int, g.nj)
}

// speedup of job j on n nodes and r replicas (spec §4.4, §6.1).
func (g *ga) speedup(j, n, r int) float64 {
	if r == 0 {
		return 0
	}
	if !g.hasGP[j] {
		return float64(r) / float64(g.fair)
	}
	if r >= memoR || n > g.nn {
		v, _, _ := g.gp[j].Optimize(n, r)
		return v / g.baseGP[j]
	}
	m := &g.memo[j][n*memoR+r]
	if *m < 0 {
		v, _, _ := g.gp[j].Optimize(n, r)
		*m = v / g.baseGP[j]
	}
	return *m
}

// evaluate sets the two objectives of x: F0, the negated power mean
// (p = −1) of the penalised scaled speedups, and F1, the negated utility.
func (g *ga) evaluate(in *indiv) {
	x := in.x
	inv, sp := 0.0, 0.0
	used := 0
	for n := 0; n < g.nn; n++ {
		for j := 0; j < g.nj; j++ {
			if x[j*g.nn+n] > 0 {
				used += g.cap[n]
				break
			}
		}
	}
	for j := 0; j < g.nj; j++ {
		row := x[j*g.nn : (j+1)*g.nn]
		n, r := 0, 0
		changed := false
		for k, v := range row {
			if v > 0 {
				n++
				r += int(v)
			}
			if v != g.base[j*g.nn+k] {
				changed = true
			}
		}
		s := g.speedup(j, n, r)
		sp += s
		scaled := s * g.share
		if changed {
			scaled *= g.factor[j]
		}
		inv += 1 / (scaled + 1e-3)
	}
	in.f[0] = -float64(g.nj) / inv
	in.f[1] = 0
	if used > 0 {
		in.f[1] = -sp / float64(used)
	}
}

// f0 evaluates a bare state's first objective.
func (g *ga) f0(x []int8) float64 {
	in := indiv{x: x}
	g.evaluate(&in)
	return in.f[0]
}

// repair enforces one distributed job per node, each job's replica cap
// (visiting its nodes in random order) and node capacity (spec §6.1).
func (g *ga) repair(x []int8) {
	nn := g.nn
	if !g.p.NoAvoid {
		seen := g.cum // per node: a distributed job earlier in the order is there
		clear(seen)
		for j := 0; j < g.nj; j++ {
			row := x[j*nn : (j+1)*nn]
			c := 0
			for _, v := range row {
				if v > 0 {
					c++
				}
			}
			if c <= 1 {
				continue
			}
			for n, v := range row {
				if v > 0 {
					if seen[n] != 0 {
						row[n] = 0
					}
					seen[n] = 1
				}
			}
		}
	}
	rng := g.p.rng
	for j := 0; j < g.nj; j++ {
		row := x[j*nn : (j+1)*nn]
		total := 0
		for _, v := range row {
			total += int(v)
		}
		if total <= g.maxRep[j] {
			continue // the cap does not bind: the visiting order is irrelevant
		}
		for k := range g.perm {
			g.perm[k] = k
		}
		for k := nn - 1; k > 0; k-- {
			m := rng.IntN(k + 1)
			g.perm[k], g.perm[m] = g.perm[m], g.perm[k]
		}
		left := g.maxRep[j]
		for _, n := range g.perm {
			v := min(int(row[n]), left)
			left -= v
			row[n] = int8(v)
		}
	}
	left := g.free
	copy(left, g.cap)
	for j := 0; j < g.nj; j++ {
		row := x[j*nn : (j+1)*nn]
		for n, v := range row {
			if int(v) > left[n] {
				v = int8(left[n])
				row[n] = v
			}
			left[n] -= int(v)
		}
	}
}

// mutate resets rows to the base, zeroes entries, and raises entries on
// nodes with free GPUs (spec §6.1). The artifact normalises both selection
// probabilities over the job axis of its state array, not the node axis:
// on a node with a free GPU, each job's entry is selected with p1 = 1/J
// (J jobs, every one of which fits a free GPU), raised to
// p1 + p2 − p1·p2 with p2 = 1/(jobs already on that node) for the jobs
// already there.
func (g *ga) mutate(x []int8) {
	nn, rng := g.nn, g.p.rng
	for j := 0; j < g.nj; j++ {
		if rng.Float64() < 0.1 {
			copy(x[j*nn:(j+1)*nn], g.base[j*nn:(j+1)*nn])
		}
	}
	for j := 0; j < g.nj; j++ {
		if rng.Float64() < 0.1 {
			for k := j * nn; k < (j+1)*nn; k++ {
				if rng.Float64() < 0.1 {
					x[k] = 0
				}
			}
		}
	}
	copy(g.free, g.cap)
	on := g.cum // per node: jobs with replicas there
	clear(on)
	for j := 0; j < g.nj; j++ {
		for n, v := range x[j*nn : (j+1)*nn] {
			g.free[n] -= int(v)
			if v > 0 {
				on[n]++
			}
		}
	}
	p1 := 1 / float64(g.nj)
	for j := 0; j < g.nj; j++ {
		row := x[j*nn : (j+1)*nn]
		for n, v := range row {
			if g.free[n] < 1 {
				continue // probability 0: no draw needed
			}
			q := p1
			if v > 0 {
				p2 := 1 / float64(on[n])
				q = p1 + p2 - p1*p2
			}
			if rng.Float64() < q {
				row[n] = v + int8(rng.IntN(g.cap[n]-int(v)+1))
			}
		}
	}
}

func hashState(x []int8) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range x {
		h ^= uint64(uint8(v))
		h *= 1099511628211
	}
	return h
}

func isDup(x []int8, h uint64, sets ...[]indiv) bool {
	for _, s := range sets {
		for i := range s {
			if s[i].hash == h && slices.Equal(s[i].x, x) {
				return true
			}
		}
	}
	return false
}
