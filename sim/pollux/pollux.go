package pollux

import (
	"slices"
)

// Pollux is the Pollux policy of the artifact (spec §6.1): every interval a
// genetic algorithm (NSGA-II, 100 states, 100 generations) searches
// job×node replica matrices for the best power mean (p = −1) of the jobs'
// fair-share-normalised speedups, with the restart penalty, one distributed
// job per node, the per-job replica cap and node capacity enforced by
// repair. Speedups come from each job's own fitted goodput model (the agent,
// spec §4), never from the true traces.
//
// The artifact's GA is unseeded; this one draws from a PCG stream seeded by
// Seed, so a run is reproducible and several seeds give the spread.
type Pollux struct {
	Seed        uint64
	Generations int // default 100
	PopSize     int // default 100
	// NoAvoid drops the interference-avoidance repair (the "noavoid" ablation).
	NoAvoid bool

	rng      *rng
	prev     [][]int8 // previous call's final front
	prevJobs []*Job   // its job order
	ga       ga
}

// NewPollux returns the policy with the artifact's settings and a seed.
func NewPollux(seed uint64) *Pollux {
	return &Pollux{Seed: seed, Generations: 100, PopSize: 100}
}

// Name implements Policy.
func (*Pollux) Name() string { return "pollux" }

// SetupPollux lets the agent choose the batch size, except ncf's, which the
// artifact fixes at 32768 (spec §3.1, §9.6).
func SetupPollux(j *Job) {
	if j.App.Name == "ncf" {
		j.TargetBatch = 32768
	}
}

func polluxMaxReplicas(j *Job) int {
	if j.App.Name == "ncf" {
		return 1
	}
	return min(max(2*j.MaxProf, 1), 64, j.App.MaxBsz/j.App.MinLocal)
}

// Allocate implements Policy.
func (p *Pollux) Allocate(now int, active []*Job, cl *Cluster) ([][]int, error) {
	if p.rng == nil {
		p.rng = newRNG(p.Seed)
	}
	jobs := slices.Clone(active)
	slices.SortStableFunc(jobs, func(a, b *Job) int {
		if c := cmpF(a.Attained, b.Attained); c != 0 {
			return c
		}
		return a.Submit - b.Submit
	})
	g := &p.ga
	g.setup(p, now, jobs, cl)
	var init [][]int8
	if p.prev == nil {
		init = [][]int8{slices.Clone(g.base)}
	} else {
		init = p.adapt(jobs, len(cl.Capacity))
	}
	front := g.run(init)
	p.prev, p.prevJobs = front, jobs
	best := 0
	for i := range front {
		if g.f0(front[i]) < g.f0(front[best]) {
			best = i
		}
	}
	pos := make(map[*Job]int, len(jobs))
	for i, j := range jobs {
		pos[j] = i
	}
	out := make([][]int, len(active))
	nn := len(cl.Capacity)
	for i, j := range active {
		row := front[best][pos[j]*nn : (pos[j]+1)*nn]
		var a []int
		for n, c := range row {
			for range c {
				a = append(a, n)
			}
		}
		out[i] = a
	}
	return out, nil
}

// adapt maps the previous front onto the current jobs by rank among the
// jobs present in both calls, not by identity, as the artifact does (spec
// §6.1, §9.10).
func (p *Pollux) adapt(jobs []*Job, nn int) [][]int8 {
	cur := make(map[*Job]bool, len(jobs))
	for _, j := range jobs {
		cur[j] = true
	}
	was := make(map[*Job]bool, len(p.prevJobs))
	var src, dst []int
	for i, j := range p.prevJobs {
		was[j] = true
		if cur[j] {
			src = append(src, i)
		}
	}
	for i, j := range jobs {
		if was[j] {
			dst = append(dst, i)
		}
	}
	out := make([][]int8, len(p.prev))
	for s, st := range p.prev {
		x := make([]int8, len(jobs)*nn)
		for k := range src {
			copy(x[dst[k]*nn:(dst[k]+1)*nn], st[src[k]*nn:(src[k]+1)*nn])
		}
		out[s] = x
	}
	return out
}
