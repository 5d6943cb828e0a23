package market

import (
	"cmp"
	"math"
	"slices"
)

// ftfTol is the relative slack of the finish-time-fairness test (§4.5):
// Δ(R+T) + r/s ≤ ρmax·F·(1 + ftfTol), floored at ftfTol absolute.
const ftfTol = 1e-9

// instance is the solve-independent view of a Problem, in canonical job
// order (see canonicalOrder), so that no result depends on input order.
type instance struct {
	jobs  []Job // canonical order
	perm  []int // perm[c] = input index of canonical job c
	G, T  int
	R     int
	delta float64 // Δ
	share float64 // s = min(1, G/N)
	set   *Settings
	f     utility
	rho   []float64 // ρ̃_i
	prio  []float64 // π_i

	// ftfRho is the bound of the FTF constraints (RhoMax, or the tightest
	// feasible one); tight selects the finish-aware constraint of
	// FairnessTightest (fair.go).
	ftfRho float64
	tight  bool
	// critAt is τ of the critical bounds of FairnessTightest (fair.go),
	// applied when crit is set.
	critAt float64
	crit   bool

	models *modelCache // the last model built (reuse.go)
}

func newInstance(p *Problem, s *Settings) *instance {
	in := &instance{G: p.GPUs, T: p.rounds(), R: p.Round, delta: p.delta(), set: s, ftfRho: s.RhoMax}
	in.perm = canonicalOrder(p.Jobs)
	in.jobs = make([]Job, len(p.Jobs))
	for c, i := range in.perm {
		in.jobs[c] = p.Jobs[i]
	}
	in.share = 1
	if n := len(in.jobs); n > in.G {
		in.share = float64(in.G) / float64(n)
	}
	in.f = newUtility(s)
	in.rho = make([]float64, len(in.jobs))
	in.prio = make([]float64, len(in.jobs))
	for c := range in.jobs {
		in.rho[c], in.prio[c] = in.priority(&in.jobs[c])
	}
	return in
}

// priority returns ρ̃ = (Δ·R + R̂/s)/F and π (§4.5, relaxation steps 1–2).
func (in *instance) priority(j *Job) (rho, pi float64) {
	rho = (in.delta*float64(in.R) + j.Remaining/in.share) / j.FairFinish
	pi = 1
	if rho > in.set.RhoMax {
		if j.Remaining >= in.delta {
			pi = math.Pow(rho, in.set.Lambda)
		} else {
			pi = math.Pow(rho, 100)
		}
	}
	if pi > maxPriority || math.IsNaN(pi) {
		pi = maxPriority
	}
	return rho, pi
}

// canonicalOrder sorts jobs by ID, then by their fields; the input index
// decides only between jobs that are identical in every field.
func canonicalOrder(jobs []Job) []int {
	perm := make([]int, len(jobs))
	for i := range perm {
		perm[i] = i
	}
	slices.SortStableFunc(perm, func(a, b int) int {
		x, y := &jobs[a], &jobs[b]
		if d := cmp.Compare(x.ID, y.ID); d != 0 { // IDs differ: done (cmp.Or would compare every field)
			return d
		}
		return cmp.Or(
			cmp.Compare(x.Workers, y.Workers),
			cmp.Compare(x.Epochs, y.Epochs),
			cmp.Compare(x.Progress, y.Progress),
			cmp.Compare(x.EpochSeconds, y.EpochSeconds),
			cmp.Compare(x.Remaining, y.Remaining),
			cmp.Compare(x.FairFinish, y.FairFinish),
			cmp.Compare(x.RemainingHigh, y.RemainingHigh),
			cmp.Compare(x.RemainingCap, y.RemainingCap),
		)
	})
	return perm
}

// utility is the concave stand-in for ln u on [0, 1] (§4.5): the
// piecewise-linear interpolation through (B_j, L_j), or ln max(u, Origin).
type utility struct {
	b, l   []float64
	exact  bool
	origin float64
}

func newUtility(s *Settings) utility {
	f := utility{b: s.breakpoints(), exact: s.ExactLog, origin: s.origin()}
	f.l = make([]float64, len(f.b))
	for j, b := range f.b {
		f.l[j] = math.Log(math.Max(b, f.origin))
	}
	return f
}

func (f *utility) at(u float64) float64 {
	seg := 0
	return f.atFrom(u, &seg)
}

// atFrom is at(u) for a caller whose u never decreases between calls: the
// segment search starts at *seg (no earlier segment can hold a larger u)
// and leaves there the segment it found.
func (f *utility) atFrom(u float64, seg *int) float64 {
	u = min(max(u, 0), 1)
	if f.exact {
		return math.Log(max(u, f.origin))
	}
	for j := *seg; j+1 < len(f.b); j++ {
		*seg = j
		if u <= f.b[j+1] {
			return f.l[j] + (f.l[j+1]-f.l[j])*(u-f.b[j])/(f.b[j+1]-f.b[j])
		}
	}
	return f.l[len(f.l)-1]
}

// jobModel is one job's allocation-independent data as a function of its
// round count n ∈ [0, hi].
type jobModel struct {
	w     int
	hi    int       // rounds after which more rounds add nothing (≤ T)
	p     []float64 // p(n) = min(Δn/d, E − c)
	r     []float64 // r(n) = max(0, R̂ − d·p(n))
	g     []float64 // a·f((c + p(n))/E), the weighted utility
	marg  []float64 // marginal gains of the concave majorant of g, len hi
	cum   []float64 // cum[n] = Σ_{m<n} marg[m]
	ftfLo int       // least n meeting the FTF constraint, −1 if none (0 when unused)
}

func (in *instance) progress(j *Job, n int) float64 {
	return min(in.delta*float64(n)/j.EpochSeconds, j.Epochs-j.Progress)
}

// remaining is the makespan term's argument of one job, max(0, R̂ − d·p).
func remaining(j *Job, p float64) float64 { return max(0, j.Remaining-j.EpochSeconds*p) }

// ftfOK reports whether remaining time r meets the FTF constraint (§4.5):
// Δ·(R+T) + r/s ≤ ρmax·F.
func (in *instance) ftfOK(j *Job, r float64) bool {
	return in.ftfAt(j, in.T, r)
}

// ftfAt is ftfOK for a job given n rounds. With the tightest bound
// (fair.go), a job that finishes inside the window (r = 0) is judged by
// the end of its n-th round, Δ·(R+n), not by the window's end: otherwise
// every short job would look late whatever it gets. Callers scan n upward
// and stop at the first n that passes, so n is the round it finishes in.
func (in *instance) ftfAt(j *Job, n int, r float64) bool {
	end := in.T
	if in.tight && r <= 0 {
		end = n
	}
	lhs := in.delta*float64(in.R+end) + r/in.share
	rhs := in.ftfRho * j.FairFinish
	return lhs <= rhs+ftfTol*max(1, math.Abs(rhs))
}

func (in *instance) jobModel(j *Job, a float64, ftf bool, mem *slab) jobModel {
	m := jobModel{w: j.Workers, hi: in.T}
	for n := 0; n <= in.T; n++ {
		if in.progress(j, n) >= j.Epochs-j.Progress {
			m.hi = n
			break
		}
	}
	m.p, m.r, m.g = mem.take(m.hi+1), mem.take(m.hi+1), mem.take(m.hi+1)
	seg := 0 // u grows with n
	for n := 0; n <= m.hi; n++ {
		m.p[n] = in.progress(j, n)
		m.r[n] = remaining(j, m.p[n])
		m.g[n] = a * in.f.atFrom((j.Progress+m.p[n])/j.Epochs, &seg)
	}
	if in.f.exact {
		m.marg = mem.take(m.hi)
		for n := range m.marg {
			m.marg[n] = m.g[n+1] - m.g[n]
		}
	} else {
		m.marg = in.pwlMarginals(j, a, m.p, mem.take(m.hi))
	}
	concaveMarginals(m.marg, &mem.blocks)
	m.cum = mem.take(m.hi + 1)
	for n, d := range m.marg {
		m.cum[n+1] = m.cum[n] + d
	}
	if ftf {
		m.ftfLo = in.ftfLow(j, &m)
	}
	return m
}

// pwlMarginals returns the increments a·(f(u_{n+1}) − f(u_n)) of the
// piecewise-linear utility, integrated segment by segment. A step that
// stays inside one segment gains exactly a·slope·Δ/(d·E), the same float
// for every such step, so that ties between rounds are exact.
func (in *instance) pwlMarginals(j *Job, a float64, p, out []float64) []float64 {
	f := &in.f
	step := in.delta / (j.EpochSeconds * j.Epochs)
	first := 0 // u0 grows with n: the segment search resumes where it ended
	for n := range out {
		u0 := (j.Progress + p[n]) / j.Epochs
		length := step
		if n+1 == len(out) && p[n+1] >= j.Epochs-j.Progress {
			length = max(0, 1-u0) // the step that completes the job
		}
		seg := first
		for seg+2 < len(f.b) && u0 >= f.b[seg+1] {
			seg++
		}
		first = seg
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

// concaveMarginals replaces the increments d of a curve by the slopes of
// its least concave majorant: their nonincreasing (antitonic) regression by
// pool-adjacent-violators. A concave curve keeps its increments.
func concaveMarginals(d []float64, scratch *[]block) {
	if nonincreasing(d) {
		// No block would merge: each keeps its increment (v/1 = v), and
		// the final pass below changes only a +0 after a −0.
		for t := 1; t < len(d); t++ {
			if d[t] == d[t-1] {
				d[t] = min(d[t], d[t-1])
			}
		}
		return
	}
	blocks := (*scratch)[:0]
	for _, v := range d {
		blocks = append(blocks, block{v, 1})
		for len(blocks) > 1 {
			a, b := blocks[len(blocks)-2], blocks[len(blocks)-1]
			if a.sum*float64(b.cnt) >= b.sum*float64(a.cnt) {
				break
			}
			blocks = blocks[:len(blocks)-1]
			blocks[len(blocks)-1] = block{a.sum + b.sum, a.cnt + b.cnt}
		}
	}
	t := 0
	for _, b := range blocks {
		for k := 0; k < b.cnt; k++ {
			d[t] = b.sum / float64(b.cnt)
			t++
		}
	}
	for t := 1; t < len(d); t++ { // rounding can leave an ulp of increase
		d[t] = min(d[t], d[t-1])
	}
	*scratch = blocks
}

// nonincreasing reports whether no increment exceeds the one before it
// (the pool-adjacent-violators' merge test on single increments).
func nonincreasing(d []float64) bool {
	for t := 1; t < len(d); t++ {
		if d[t-1] < d[t] {
			return false
		}
	}
	return true
}

type block struct {
	sum float64
	cnt int
}

// slab hands out float64 slices carved from large chunks, so that a model's
// per-job curves cost a few allocations instead of several per job.
type slab struct {
	buf    []float64
	blocks []block
}

func (s *slab) take(n int) []float64 {
	if len(s.buf) < n {
		s.buf = make([]float64, max(n, 8192))
	}
	out := s.buf[:n:n]
	s.buf = s.buf[n:]
	return out
}
