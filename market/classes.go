package market

import (
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
	classes []class   // widest first
	chain   bool      // every width divides the next wider one
	ratio   []item    // all job-rounds by gain per GPU-round, for repairs (lazy)
	cands   []float64 // candidates() (lazy; read-only once computed)
	// rep[c] is the first job (canonical order) equal to c in every field
	// but the ID and of equal weight: c's curves are its curves (shared,
	// read-only), and every per-job value computed from the job and its
	// curves alone is its value (twin.go).
	rep []int32
	// lo holds the FTF lower bounds when they differ from the curves'
	// (jobModel.ftfLo): a reused model shares the curves (reuse.go).
	lo []int
}

// ftfLo is job c's FTF lower bound: the least n meeting the FTF
// constraint, −1 if none (0 when unused).
func (m *model) ftfLo(c int) int {
	if m.lo != nil {
		return m.lo[c]
	}
	return m.jobs[c].ftfLo
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
	if m := in.reuseModel(weights, ftf); m != nil {
		return m
	}
	m := &model{in: in, k: in.set.K, ftf: ftf}
	m.jobs = make([]jobModel, len(in.jobs))
	m.rep = in.reps(weights)
	var mem slab
	for c := range in.jobs {
		if r := m.rep[c]; int(r) != c {
			m.jobs[c] = m.jobs[r] // the same curves and FTF bound
		} else {
			m.jobs[c] = in.jobModel(&in.jobs[c], weights[c], ftf, &mem)
		}
		jm := &m.jobs[c]
		m.base += jm.g[0]
		m.uScale += max(math.Abs(jm.g[0]), math.Abs(jm.g[jm.hi]))
		m.rScale = max(m.rScale, in.jobs[c].Remaining)
	}
	m.buildClasses()
	in.remember(m, weights)
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
		if jm := &m.jobs[c]; jm.hi > 0 {
			cl := &m.classes[slices.Index(widths, jm.w)]
			cl.jobs = append(cl.jobs, int32(c))
		}
	}
	for j := range m.classes {
		m.classes[j].items = m.sortedItems(m.classes[j].jobs, false)
	}
}

// ratioItems returns every job-round by gain per GPU-round (computed once).
func (m *model) ratioItems() []item {
	if m.ratio == nil {
		var all []int32
		for j := range m.classes {
			all = append(all, m.classes[j].jobs...)
		}
		m.ratio = m.sortedItems(all, true)
	}
	return m.ratio
}

// sortedItems lists the job-rounds of jobs by gain (or gain per GPU) desc,
// then round n asc, then job asc. A job's marginal gains are nonincreasing
// and mostly constant along a segment of the log, so runs of equal gains
// are sorted instead of single rounds; ties are expanded in (n, job) order.
func (m *model) sortedItems(jobs []int32, perGPU bool) []item {
	total, count := 0, 0
	for _, c := range jobs {
		jm := &m.jobs[c]
		total += len(jm.marg)
		for n, d := range jm.marg {
			if n == 0 || d != jm.marg[n-1] {
				count++
			}
		}
	}
	runs := make([]run, 0, count)
	for _, c := range jobs {
		jm := &m.jobs[c]
		for n, d := range jm.marg {
			if n > 0 && d == jm.marg[n-1] {
				runs[len(runs)-1].cnt++
				continue
			}
			key := d
			if perGPU {
				key = d / float64(jm.w)
			}
			runs = append(runs, run{key: descending(key), gain: d, job: c, n0: int32(n), cnt: 1})
		}
	}
	runs = sortRuns(runs)
	items := make([]item, 0, total)
	var active [2][]run
	for i := 0; i < len(runs); {
		j := i + 1
		for j < len(runs) && runs[j].key == runs[i].key {
			j++
		}
		if j == i+1 { // one job's rounds, in order
			r := &runs[i]
			for n := r.n0; n < r.n0+r.cnt; n++ {
				items = append(items, item{job: r.job, n: n, gain: r.gain})
			}
		} else {
			items = expandTies(items, runs[i:j], &active)
		}
		i = j
	}
	return items
}

// expandTies appends the job-rounds of runs, the runs of one key in (n0,
// job) order, to items in (n, job) order: round by round, the runs that
// hold round n (those begun earlier and still running, then those
// beginning at n) merged by job. A job's runs of one key never overlap
// (its gains are nonincreasing), so each (n, job) comes once and the order
// is the one sorting the expanded job-rounds by (n, job) gives. active is
// scratch for the runs holding the current and the next round.
func expandTies(items []item, runs []run, active *[2][]run) []item {
	single := true // every run one round: already in (n, job) order
	for k := range runs {
		if runs[k].cnt != 1 {
			single = false
			break
		}
	}
	if single {
		for k := range runs {
			items = append(items, item{job: runs[k].job, n: runs[k].n0, gain: runs[k].gain})
		}
		return items
	}
	cur, next := active[0][:0], active[1][:0]
	n := runs[0].n0
	for i := 0; i < len(runs) || len(cur) > 0; n++ {
		if len(cur) == 0 {
			n = max(n, runs[i].n0) // nothing running: skip to the next start
		}
		k := i
		for k < len(runs) && runs[k].n0 == n {
			k++
		}
		fresh := runs[i:k]
		i = k
		next = next[:0]
		for a, b := 0, 0; a < len(cur) || b < len(fresh); {
			var r *run
			if b == len(fresh) || (a < len(cur) && cur[a].job < fresh[b].job) {
				r, a = &cur[a], a+1
			} else {
				r, b = &fresh[b], b+1
			}
			items = append(items, item{job: r.job, n: n, gain: r.gain})
			if n+1 < r.n0+r.cnt {
				next = append(next, *r)
			}
		}
		cur, next = next, cur
	}
	active[0], active[1] = cur, next
	return items
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

// candidates returns the sorted distinct values of r_i(n) that are at least
// max_i r_i(hi_i): every makespan bound M the optimum can have (its
// max_i r_i(n_i) is one of them).
func (m *model) candidates() []float64 {
	if m.cands != nil { // computed before, for this model or the one it reuses
		return m.cands
	}
	floor := 0.0 // no allocation has a smaller makespan term
	for c := range m.jobs {
		floor = max(floor, m.jobs[c].r[m.jobs[c].hi])
	}
	var bits []uint64
	for c := range m.jobs {
		if int(m.rep[c]) != c {
			continue // its values are its representative's
		}
		for _, r := range m.jobs[c].r {
			if r >= floor {
				bits = append(bits, math.Float64bits(r))
			}
		}
	}
	// r = max(0, ·) is +0 or positive, so the bit patterns order as the
	// values do and equal patterns are equal values; a radix sort pays
	// off on many of them (sortPositive).
	if len(bits) < radixMin {
		slices.Sort(bits)
	} else {
		bits = sortPositive(bits)
	}
	bits = slices.Compact(bits)
	m.cands = make([]float64, len(bits))
	for k, b := range bits {
		m.cands[k] = math.Float64frombits(b)
	}
	return m.cands
}

// lowerBounds sets lo_i = the least n with r_i(n) ≤ bound (and meeting the
// FTF constraint in an FTF phase). It reports false if some job cannot.
func (m *model) lowerBounds(bound float64, lo []int) bool {
	for c := range m.jobs {
		if r := int(m.rep[c]); r != c {
			lo[c] = lo[r] // the same curve and FTF bound
			continue
		}
		jm := &m.jobs[c]
		n := slices.IndexFunc(jm.r, func(r float64) bool { return r <= bound })
		if n < 0 || (m.ftf && m.ftfLo(c) < 0) {
			return false
		}
		lo[c] = max(n, m.ftfLo(c))
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
