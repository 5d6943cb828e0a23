package market

import (
	"container/heap"
	"math"
	"slices"
)

// searcher finds the best allocation of one model: an outer search over the
// makespan bound M, an exact class relaxation per M, and branch and bound
// where the relaxation's allocation does not pack into the rounds.
type searcher struct {
	m        *model
	x        *relaxer
	sx       *strongRelaxer // nil: the profile relaxation is unavailable
	pk       *packer
	tol      float64 // utility differences below this are ties
	gap      float64 // Settings.Gap
	maxNodes int
	cands    []float64

	inc      incumbent
	bound    float64 // best objective bound of the regions closed without proof
	limit    bool    // the node budget ran out
	unproven bool    // whether the FTF set is feasible went unanswered
	seq      int
	stats    Stats
}

type incumbent struct {
	ok  bool
	u   float64 // utility Σ g_i(n_i)
	mr  float64 // max_i r_i(n_i)
	val float64 // u − k·mr
	n   []int
	on  []bool
}

func newSearcher(m *model, set *Settings) *searcher {
	s := &searcher{m: m, pk: newPacker(m), tol: 1e-12 * max(1, m.uScale), gap: set.Gap,
		maxNodes: set.maxNodes(), bound: negInf}
	if m.chain && m.in.G < 1<<16 {
		s.sx = newStrongRelaxer(m)
	}
	return s
}

// promising reports whether a region whose utility is at most ub and whose
// makespan term is at least bound can beat the incumbent by more than
// slack. The difference is formed term by term, so that a large makespan
// penalty does not swallow small utility differences.
func (s *searcher) promising(ub, bound, slack float64) bool {
	if !s.inc.ok {
		return ub > negInf
	}
	return (ub-s.inc.u)-s.m.k*(bound-s.inc.mr) > slack
}

// nodeSlack is the improvement a branch-and-bound node must promise:
// Settings.Gap relative to the incumbent's objective, the relative gap
// Result.Gap reports (Gurobi's MIPGap, as in the original).
func (s *searcher) nodeSlack() float64 {
	return max(s.tol, s.gap*math.Abs(s.inc.val))
}

// note records the objective bound of a region closed without exploring it.
func (s *searcher) note(ub, bound float64) { s.bound = max(s.bound, ub-s.m.k*bound) }

// run solves the model. It reports false if no allocation meets the lower
// bounds (the FTF constraints) at all.
//
// Every allocation's max_i r_i(n_i) is one of the candidates c_j, and its
// objective is at most U(c_j) − k·c_j, where U(M) is the best utility with
// all r_i ≤ M (nondecreasing in M). Between two solved candidates a < b,
// every c_j (a < j < b) is bounded by UB(c_b) − k·c_{a+1}; intervals are
// split at their midpoint, best bound first, until pruned.
func (s *searcher) run() bool {
	defer func() { s.stats.PackChecks = s.pk.checks }()
	s.cands = s.m.candidates()
	s.stats.Candidates = len(s.cands)
	top := len(s.cands) - 1
	j0, ok := s.lowest(top)
	if !ok {
		return false
	}
	s.evaluate(j0)
	if j0 == top {
		return true
	}
	q := &intervals{}
	push := func(a, b int, ub float64) {
		if b-a >= 2 {
			heap.Push(q, interval{a: a, b: b, ub: ub, bound: ub - s.m.k*s.cands[a+1]})
		}
	}
	push(j0, top, s.evaluate(top))
	for q.Len() > 0 {
		iv := heap.Pop(q).(interval)
		if s.limit || !s.promising(iv.ub, s.cands[iv.a+1], s.tol) {
			s.note(iv.ub, s.cands[iv.a+1])
			continue
		}
		mid := (iv.a + iv.b) / 2
		push(iv.a, mid, s.evaluate(mid))
		push(mid, iv.b, iv.ub)
	}
	return true
}

// lowest bisects for the smallest candidate whose lower bounds pack. It
// reports false if even the largest (no makespan bound) does not. A packing
// question left unanswered (widths off a chain) counts as "does not pack";
// the candidates that this may have skipped are then bounded by the class
// relaxation at the largest of them, so that Bound stays valid.
func (s *searcher) lowest(top int) (int, bool) {
	lo := make([]int, len(s.m.jobs))
	check := func(j int) (ok, proven bool) {
		if !s.m.lowerBounds(s.cands[j], lo) {
			return false, true
		}
		return s.pk.check(lo)
	}
	if ok, proven := check(top); !ok {
		s.unproven = !proven // the FTF set may be feasible after all
		return 0, false
	}
	a, b, known := -1, top, -1 // check(a) false (or a = −1), check(b) true
	for b-a > 1 {
		mid := (a + b) / 2
		ok, proven := check(mid)
		switch {
		case ok:
			b = mid
		default:
			a = mid
			if proven {
				known = mid
			}
		}
	}
	if known < a { // candidates in (known, b) were never proven infeasible
		root := &node{lo: make([]int, len(lo)), hi: make([]int, len(lo)), n: make([]int, len(lo))}
		for c := range s.m.jobs {
			root.hi[c] = s.m.jobs[c].hi
		}
		if s.m.lowerBounds(s.cands[b-1], root.lo) && s.relax(root) {
			s.note(root.bound, s.cands[known+1])
		}
	}
	return b, true
}

// evaluate solves the problem with makespan bound c_j by branch and bound
// and returns the root relaxation's utility bound (−∞ if infeasible).
func (s *searcher) evaluate(j int) float64 {
	s.stats.Evaluated++
	M := s.cands[j]
	N := len(s.m.jobs)
	root := &node{lo: make([]int, N), hi: make([]int, N), n: make([]int, N)}
	if !s.m.lowerBounds(s.cands[j], root.lo) {
		return negInf
	}
	for c := range s.m.jobs {
		root.hi[c] = s.m.jobs[c].hi
	}
	if !s.relax(root) {
		return negInf
	}
	ub := negInf // the largest bound of a closed leaf
	q := &nodes{root}
	for q.Len() > 0 {
		nd := heap.Pop(q).(*node)
		if !s.promising(nd.bound, M, s.nodeSlack()) || s.stats.Nodes >= s.maxNodes {
			s.limit = s.limit || s.promising(nd.bound, M, s.nodeSlack())
			s.note(nd.bound, M)
			ub = max(ub, nd.bound)
			continue
		}
		s.stats.Nodes++
		if s.branch(nd, M, q) {
			ub = max(ub, nd.bound)
		}
	}
	return ub
}

// relax solves the relaxation of a node (the profile relaxation for
// strong nodes, when it does not give up); false if infeasible.
func (s *searcher) relax(nd *node) bool {
	if nd.strong && s.sx != nil {
		v, ok, done := s.sx.solve(nd.lo, nd.hi, nd.n)
		if done {
			s.stats.Profiles++
			nd.bound = s.m.base + v
			return ok
		}
		s.sx = nil // too many profiles: keep to the class relaxation
	}
	nd.strong = false
	if s.x == nil { // built on first use: a phase whose bounds never pack needs none
		s.x = newRelaxer(s.m)
	}
	v, ok := s.x.solve(nd.lo, nd.hi, nd.n)
	nd.bound = s.m.base + v
	return ok
}

// branch handles one node: an allocation that packs is a candidate
// incumbent; one that does not is repaired into an incumbent and split by
// the disjunction "some job of a conflicting set J gets fewer rounds". It
// reports whether the node is a leaf (not split); nd.bound then bounds the
// utility of its region.
func (s *searcher) branch(nd *node, M float64, q *nodes) bool {
	ok, proven := s.pk.place(nd.n)
	if !ok && proven && s.closedByRepair(nd, M) {
		return true
	}
	if !ok && proven && !nd.strong && s.sx != nil {
		// Tighten the bound with the profile relaxation before splitting.
		nd.strong = true
		if !s.relax(nd) {
			nd.bound = negInf // no allocation in this region at all
			return true
		}
		if ok, proven = s.pk.place(nd.n); !ok && proven && s.closedByRepair(nd, M) {
			return true
		}
	}
	if ok {
		s.offer(nd.n, s.pk.on)
		if u := s.m.utilityOf(nd.n); nd.bound-u > s.tol {
			s.note(nd.bound, M) // the concave majorant was not tight
		}
		return true
	}
	if !proven {
		// Unanswered: the split below drops this allocation's region,
		// so its bound is kept.
		s.note(nd.bound, M)
		s.repair(nd)
	}
	J := s.pk.conflict(nd.n)
	s.stats.Branches++
	for i, c := range J {
		if nd.n[c] <= nd.lo[c] {
			continue
		}
		ch := &node{lo: slices.Clone(nd.lo), hi: slices.Clone(nd.hi), n: make([]int, len(nd.n)), strong: nd.strong}
		ch.hi[c] = nd.n[c] - 1
		for _, l := range J[:i] {
			ch.lo[l] = max(ch.lo[l], nd.n[l])
		}
		if s.relax(ch) {
			s.seq++
			ch.seq = s.seq
			heap.Push(q, ch)
		}
	}
	return false
}

// closedByRepair repairs a node's unpackable allocation into incumbents
// and reports whether the node is then no longer promising (it is noted).
func (s *searcher) closedByRepair(nd *node, M float64) bool {
	s.repair(nd)
	if s.promising(nd.bound, M, s.nodeSlack()) {
		return false
	}
	s.note(nd.bound, M)
	return true
}

// offer records allocation n (placed as in on) if it beats the incumbent.
func (s *searcher) offer(n []int, on []bool) bool {
	u, mr := s.m.utilityOf(n), s.m.maxRemaining(n)
	if s.inc.ok && (u-s.inc.u)-s.m.k*(mr-s.inc.mr) <= 0 {
		return false
	}
	s.inc = incumbent{ok: true, u: u, mr: mr, val: u - s.m.k*mr, n: slices.Clone(n), on: slices.Clone(on)}
	return true
}

// repair turns a node's unpackable allocation into packed ones: (a) pack
// as much of it as fits, (b) pack the node's lower bounds; then fill free
// capacity by gain per GPU-round. Either counts if it meets the bounds.
func (s *searcher) repair(nd *node) {
	a := slices.Clone(nd.n)
	s.pk.greedy(a, true)
	if geq(a, nd.lo) {
		s.fill(a, nd.hi)
		if s.offer(a, s.pk.on) {
			s.stats.Repairs++
		}
	}
	b := slices.Clone(nd.lo)
	if ok, _ := s.pk.place(b); ok {
		s.fill(b, nd.hi)
		if s.offer(b, s.pk.on) {
			s.stats.Repairs++
		}
	}
}

// fill adds job-rounds to the packer's placement of n, best gain per
// GPU-round first, each into the round with the most free GPUs.
func (s *searcher) fill(n, hi []int) {
	T := s.pk.T
	for _, it := range s.m.ratioItems() {
		c := int(it.job)
		if int(it.n) != n[c] || n[c] >= hi[c] {
			continue
		}
		w, best := s.m.jobs[c].w, -1
		for t := 0; t < T; t++ {
			if !s.pk.on[c*T+t] && s.pk.free[t] >= w && (best < 0 || s.pk.free[t] > s.pk.free[best]) {
				best = t
			}
		}
		if best >= 0 {
			s.pk.on[c*T+best] = true
			s.pk.free[best] -= w
			n[c]++
		}
	}
}

func geq(a, b []int) bool {
	for i := range a {
		if a[i] < b[i] {
			return false
		}
	}
	return true
}

// node is a branch-and-bound subproblem lo ≤ n ≤ hi with its relaxation.
type node struct {
	lo, hi, n []int
	bound     float64
	seq       int
	strong    bool // bounded by the profile relaxation
}

type nodes []*node

func (q nodes) Len() int { return len(q) }
func (q nodes) Less(i, j int) bool {
	return q[i].bound > q[j].bound || (q[i].bound == q[j].bound && q[i].seq < q[j].seq)
}
func (q nodes) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *nodes) Push(x any)   { *q = append(*q, x.(*node)) }
func (q *nodes) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// interval is the open range of candidate indices (a, b) with a, b solved.
type interval struct {
	a, b  int
	ub    float64 // utility bound at c_b
	bound float64 // ub − k·c_{a+1}
}

type intervals []interval

func (q intervals) Len() int { return len(q) }
func (q intervals) Less(i, j int) bool {
	return q[i].bound > q[j].bound || (q[i].bound == q[j].bound && q[i].a < q[j].a)
}
func (q intervals) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *intervals) Push(x any)   { *q = append(*q, x.(interval)) }
func (q *intervals) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// balanceTwins evens out jobs that are identical but for their ID: while
// two of them differ by two or more rounds, one round moves from the larger
// to the smaller (into a round where only the larger runs: same width, so
// the round still fits). Their curves are the same concave function, so
// this never lowers the objective and keeps every lower bound; it picks,
// among tied optima, the one that treats equal jobs equally.
func (s *searcher) balanceTwins() {
	if !s.inc.ok {
		return
	}
	n, on, T := s.inc.n, s.inc.on, s.m.in.T
	changed := false
	for _, g := range twins(s.m.in.jobs) {
		for len(g) > 1 {
			hi := slices.MaxFunc(g, func(a, b int) int { return n[a] - n[b] })
			lo := slices.MinFunc(g, func(a, b int) int { return n[a] - n[b] })
			if n[hi]-n[lo] < 2 {
				break
			}
			for t := 0; t < T; t++ {
				if on[hi*T+t] && !on[lo*T+t] {
					on[hi*T+t], on[lo*T+t] = false, true
					break
				}
			}
			n[hi]--
			n[lo]++
			changed = true
		}
	}
	if changed {
		s.inc.u, s.inc.mr = s.m.utilityOf(n), s.m.maxRemaining(n)
		s.inc.val = s.inc.u - s.m.k*s.inc.mr
	}
}

// twins returns the groups of jobs identical in every field but ID, each
// in canonical order (a group of one job may occur after a hash collision;
// balanceTwins leaves those alone). Jobs are bucketed by a hash of their
// fields and compared field by field, so that the common case, no twins,
// costs one small map entry per job.
func twins(jobs []Job) [][]int {
	same := func(a, b *Job) bool {
		return a.Workers == b.Workers && a.Epochs == b.Epochs && a.Progress == b.Progress &&
			a.EpochSeconds == b.EpochSeconds && a.Remaining == b.Remaining && a.FairFinish == b.FairFinish
	}
	first := make(map[uint64]int32, len(jobs)) // hash → first job with it
	var groups [][]int
	var extra map[uint64][]int // hash → groups indices of later distinct jobs
	for c := range jobs {
		j := &jobs[c]
		h := uint64(j.Workers)
		for _, v := range [...]float64{j.Epochs, j.Progress, j.EpochSeconds, j.Remaining, j.FairFinish} {
			h = (h^math.Float64bits(v+0))*0x100000001b3 + 0x9e3779b97f4a7c15
		}
		f, seen := first[h]
		if !seen {
			first[h] = int32(c)
			continue
		}
		if extra == nil {
			extra = map[uint64][]int{}
		}
		if _, ok := extra[h]; !ok {
			groups = append(groups, []int{int(f)})
			extra[h] = []int{len(groups) - 1}
		}
		placed := false
		for _, gi := range extra[h] {
			if same(&jobs[groups[gi][0]], j) {
				groups[gi] = append(groups[gi], c)
				placed = true
				break
			}
		}
		if !placed {
			groups = append(groups, []int{c})
			extra[h] = append(extra[h], len(groups)-1)
		}
	}
	return groups
}
