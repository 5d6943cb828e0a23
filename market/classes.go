package market

import (
	"cmp"
	"math"
	"slices"
)

// model is one solve phase (the FTF problem, or the relaxation) in
// canonical job order: per-job curves, width classes and sorted job-rounds.
type model struct {
	in      *instance
	jobs    []jobModel
	k       float64
	base    float64 // Σ_i g_i(0)
	uScale  float64 // Σ_i max |g_i|: the magnitude of the utility's terms
	rScale  float64 // max_i R̂_i
	ftf     bool
	classes []class // widest first
	chain   bool    // every width divides the next wider one
	ratio   []item  // all job-rounds by gain per GPU-round, for repairs
}

// class groups the jobs of one gang width. Its job-rounds all cost the same
// number of GPUs, so within a class the best use of m job-rounds is the m
// largest marginal gains (unit-weight greedy, exact for concave curves).
type class struct {
	width int
	step  int // gcd of the widths of this and all wider classes
	cap   int // T · (largest sum ≤ G of widths of this and wider classes)
	jobs  []int32
	items []item // (job, n) by gain desc, n asc, job asc
}

// item is the n-th round (from 0) of a job and its marginal gain.
type item struct {
	job  int32
	n    int32
	gain float64
}

func newModel(in *instance, weights []float64, ftf bool) *model {
	m := &model{in: in, k: in.set.K, ftf: ftf}
	m.jobs = make([]jobModel, len(in.jobs))
	for c := range in.jobs {
		m.jobs[c] = in.jobModel(&in.jobs[c], weights[c], ftf)
		jm := &m.jobs[c]
		m.base += jm.g[0]
		m.uScale += max(math.Abs(jm.g[0]), math.Abs(jm.g[jm.hi]))
		m.rScale = max(m.rScale, in.jobs[c].Remaining)
	}
	m.buildClasses()
	return m
}

func (m *model) buildClasses() {
	var widths []int
	for c := range m.jobs {
		if m.jobs[c].hi > 0 && !slices.Contains(widths, m.jobs[c].w) {
			widths = append(widths, m.jobs[c].w)
		}
	}
	slices.Sort(widths)
	slices.Reverse(widths)
	m.chain = true
	step := 0
	for j, w := range widths {
		if j > 0 && widths[j-1]%w != 0 {
			m.chain = false
		}
		step = gcd(step, w)
		m.classes = append(m.classes, class{
			width: w,
			step:  step,
			cap:   m.in.T * maxSubsetSum(m.in.G, widths[:j+1]),
		})
	}
	for c := range m.jobs {
		jm := &m.jobs[c]
		if jm.hi == 0 {
			continue
		}
		cl := &m.classes[slices.Index(widths, jm.w)]
		cl.jobs = append(cl.jobs, int32(c))
		for n, d := range jm.marg {
			it := item{job: int32(c), n: int32(n), gain: d}
			cl.items = append(cl.items, it)
			m.ratio = append(m.ratio, it)
		}
	}
	byGain := func(a, b item) int {
		return cmp.Or(cmp.Compare(b.gain, a.gain), cmp.Compare(a.n, b.n), cmp.Compare(a.job, b.job))
	}
	for j := range m.classes {
		slices.SortFunc(m.classes[j].items, byGain)
	}
	slices.SortFunc(m.ratio, func(a, b item) int {
		ra := a.gain / float64(m.jobs[a.job].w)
		rb := b.gain / float64(m.jobs[b.job].w)
		return cmp.Or(cmp.Compare(rb, ra), byGain(a, b))
	})
}

// maxSubsetSum is the largest total ≤ g of a multiset of the given widths:
// the most GPUs one round can give to gangs of these widths.
func maxSubsetSum(g int, widths []int) int {
	reach := make([]bool, g+1)
	reach[0] = true
	best := 0
	for s := 1; s <= g; s++ {
		for _, w := range widths {
			if w <= s && reach[s-w] {
				reach[s] = true
				best = s
				break
			}
		}
	}
	return best
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// utilityOf returns the weighted utility Σ_i g_i(n_i) (true curves).
func (m *model) utilityOf(n []int) float64 {
	u := 0.0
	for c := range m.jobs {
		u += m.jobs[c].g[n[c]]
	}
	return u
}

// maxRemaining returns max_i r_i(n_i).
func (m *model) maxRemaining(n []int) float64 {
	r := 0.0
	for c := range m.jobs {
		r = max(r, m.jobs[c].r[n[c]])
	}
	return r
}

// objective is the solved objective (§4.5) of round counts n.
func (m *model) objective(n []int) float64 {
	return m.utilityOf(n) - m.k*m.maxRemaining(n)
}

// candidates returns the sorted distinct values of r_i(n): every makespan
// bound M the optimum can have (its max_i r_i(n_i) is one of them).
func (m *model) candidates() []float64 {
	var cs []float64
	for c := range m.jobs {
		cs = append(cs, m.jobs[c].r...)
	}
	slices.Sort(cs)
	return slices.Compact(cs)
}

// lowerBounds sets lo_i = the least n with r_i(n) ≤ bound (and meeting the
// FTF constraint in an FTF phase). It reports false if some job cannot.
func (m *model) lowerBounds(bound float64, lo []int) bool {
	for c := range m.jobs {
		jm := &m.jobs[c]
		n := slices.IndexFunc(jm.r, func(r float64) bool { return r <= bound })
		if n < 0 || (m.ftf && jm.ftfLo < 0) {
			return false
		}
		lo[c] = max(n, jm.ftfLo)
	}
	return true
}

// price is the highest marginal gain per GPU-round left unallocated.
func (m *model) price(n []int) float64 {
	p := 0.0
	for c := range m.jobs {
		jm := &m.jobs[c]
		if n[c] < jm.hi {
			p = max(p, jm.marg[n[c]]/float64(jm.w))
		}
	}
	return p
}

var negInf = math.Inf(-1)
