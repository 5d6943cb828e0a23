package market

import (
	"container/heap"
	"slices"
	"sort"
)

// searcher finds the best allocation of one model: an outer search over the
// makespan bound M, an exact class relaxation per M, and branch and bound
// where the relaxation's allocation does not pack into the rounds.
type searcher struct {
	m        *model
	x        *relaxer
	pk       *packer
	tol      float64 // utility differences below this are ties
	maxNodes int
	cands    []float64

	inc      incumbent
	bound    float64 // best objective bound of the regions closed without proof
	limit    bool    // the node budget ran out
	unproven bool    // a packing question went unanswered
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
	return &searcher{m: m, x: newRelaxer(m), pk: newPacker(m), tol: 1e-12 * max(1, m.uScale),
		maxNodes: set.maxNodes(), bound: negInf}
}

// promising reports whether a region whose utility is at most ub and whose
// makespan term is at least bound can beat the incumbent by more than the
// tolerance. The difference is formed term by term, so that a large
// makespan penalty does not swallow small utility differences.
func (s *searcher) promising(ub, bound float64) bool {
	if !s.inc.ok {
		return ub > negInf
	}
	return (ub-s.inc.u)-s.m.k*(bound-s.inc.mr) > s.tol
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
	s.cands = s.m.candidates()
	s.stats.Candidates = len(s.cands)
	top := len(s.cands) - 1
	lo := make([]int, len(s.m.jobs))
	feasible := func(j int) bool {
		if !s.m.lowerBounds(s.cands[j], lo) {
			return false
		}
		ok, proven := s.pk.check(lo)
		s.unproven = s.unproven || !proven
		return ok
	}
	if !feasible(top) {
		return false
	}
	j0 := sort.Search(top, feasible)
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
		if s.limit || !s.promising(iv.ub, s.cands[iv.a+1]) {
			s.note(iv.ub, s.cands[iv.a+1])
			continue
		}
		mid := (iv.a + iv.b) / 2
		push(iv.a, mid, s.evaluate(mid))
		push(mid, iv.b, iv.ub)
	}
	s.stats.PackChecks = s.pk.checks
	return true
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
	ub := root.bound
	q := &nodes{root}
	for q.Len() > 0 {
		nd := heap.Pop(q).(*node)
		if !s.promising(nd.bound, M) || s.stats.Nodes >= s.maxNodes {
			s.limit = s.limit || s.promising(nd.bound, M)
			s.note(nd.bound, M)
			continue
		}
		s.stats.Nodes++
		s.branch(nd, M, q)
	}
	return ub
}

// relax solves the class relaxation of a node; false if infeasible.
func (s *searcher) relax(nd *node) bool {
	v, ok := s.x.solve(nd.lo, nd.hi, nd.n)
	nd.bound = s.m.base + v
	return ok
}

// branch handles one node: an allocation that packs is a candidate
// incumbent; one that does not is repaired into an incumbent and split by
// the disjunction "some job of a conflicting set J gets fewer rounds".
func (s *searcher) branch(nd *node, M float64, q *nodes) {
	ok, proven := s.pk.check(nd.n)
	if ok {
		s.offer(nd.n, s.pk.on)
		if u := s.m.utilityOf(nd.n); nd.bound-u > s.tol {
			s.note(nd.bound, M) // the concave majorant was not tight
		}
		return
	}
	if !proven {
		s.unproven = true
		s.note(nd.bound, M)
	}
	s.repair(nd)
	J := s.pk.conflict(nd.n)
	s.stats.Branches++
	for i, c := range J {
		if nd.n[c] <= nd.lo[c] {
			continue
		}
		ch := &node{lo: slices.Clone(nd.lo), hi: slices.Clone(nd.hi), n: make([]int, len(nd.n))}
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
	if ok, _ := s.pk.check(b); ok {
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
	for _, it := range s.m.ratio {
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
