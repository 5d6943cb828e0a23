package market

import "slices"

// The profile relaxation, a tighter bound used where the class relaxation's
// allocation does not pack (widths forming a divisibility chain only).
//
// Classes are taken widest first. After classes 0..j−1 the rounds carry a
// load profile P (GPUs per round). Class j's jobs then see s_t =
// ⌊(G − P_t)/w_j⌋ slots in round t, and a vector of round counts of class j
// fits those slots, one round per job per round, iff (Gale–Ryser) the sum
// of its j' largest counts is at most φ(j') = Σ_t min(s_t, j') for every j'.
// Under that constraint the best class utility for every total is the
// greedy prefix of its job-rounds in gain order (the feasible vectors form
// a polymatroid). The class's job-rounds are then water-filled onto P, one
// w_j-unit at a time into the least-loaded round. Water-filling gives the
// most balanced profile that adding those units can give, and balance only
// enlarges every φ of the narrower classes (Σ_t min(s_t, j') is
// Schur-concave in the slots, which are affine in the loads because every
// load is a multiple of w_j), so the relaxation is valid; it remains
// optimistic because a job cannot always follow the water level.
// The dynamic program runs over the profiles reached, memoized.
type strongRelaxer struct {
	m      *model
	lo, hi []int
	memo   map[string]strongState
	budget int // work left; the relaxation gives up when it runs out
	spent  int // work of all solves so far
	cur    []int
	slack  []int
	cnt    []int
	pre    [][]float64 // per class: the greedy's prefix gains
	next   [][]int     // per class: the successor profile
}

type strongState struct {
	v  float64 // best utility above the base of classes ≥ j from here
	mj int32   // optional job-rounds of class j in the best choice
}

// strongBudget bounds the work of one profile relaxation, counted in steps
// of its greedy runs and profile updates (about 8 ns each: 20 ms).
const strongBudget = 2_500_000

// strongTotal bounds the work of all profile relaxations of one solve
// phase (about 150 ms); past it the search keeps to the class relaxation.
const strongTotal = 20_000_000

func newStrongRelaxer(m *model) *strongRelaxer {
	x := &strongRelaxer{m: m, cur: make([]int, len(m.jobs)), cnt: make([]int, m.in.T+2),
		pre: make([][]float64, len(m.classes)), next: make([][]int, len(m.classes))}
	for j := range x.next {
		x.next[j] = make([]int, m.in.T)
	}
	return x
}

// solve returns the profile relaxation's bound above the base and its
// allocation in n. ok is false if the bounds admit no allocation; done is
// false if the state budget ran out (then nothing is claimed).
func (x *strongRelaxer) solve(lo, hi, n []int) (v float64, ok, done bool) {
	x.lo, x.hi = lo, hi
	x.memo = map[string]strongState{}
	x.budget = min(strongBudget, strongTotal-x.spent)
	defer func() { x.spent += min(strongBudget, strongTotal-x.spent) - x.budget }()
	prof := make([]int, x.m.in.T)
	v, done = x.value(0, prof)
	if !done || v == negInf {
		return negInf, false, done
	}
	copy(n, lo)
	next := make([]int, len(prof))
	for j := range x.m.classes {
		take := int(x.memo[x.key(j, prof)].mj)
		_, fc := x.gains(j, prof, take, n)
		x.advance(j, prof, next, fc+take, x.spreadOf(j))
		prof, next = next, prof
	}
	return v, true, true
}

// value is the best utility of classes j.. on profile prof (sorted
// ascending, not modified); false if the budget ran out.
func (x *strongRelaxer) value(j int, prof []int) (float64, bool) {
	if j == len(x.m.classes) {
		return 0, true
	}
	k := x.key(j, prof)
	if st, seen := x.memo[k]; seen {
		return st.v, true
	}
	cl := &x.m.classes[j]
	if x.budget -= len(cl.items) * (x.m.in.T + 2*len(cl.jobs)); x.budget < 0 {
		return 0, false
	}
	pre, fc := x.gains(j, prof, -1, nil)
	best := strongState{v: negInf}
	switch {
	case pre == nil:
	case j == len(x.m.classes)-1: // the narrowest class takes all it can
		best = strongState{v: pre[len(pre)-1], mj: int32(len(pre) - 1)}
	default:
		next := x.next[j]
		sp := x.spreadOf(j)
		if x.budget -= 4 * x.m.in.T * len(pre); x.budget < 0 {
			return 0, false
		}
		for mm := range pre {
			if !x.advance(j, prof, next, fc+mm, sp) {
				continue
			}
			rest, done := x.value(j+1, next)
			if !done {
				return 0, false
			}
			if v := pre[mm] + rest; v > best.v {
				best = strongState{v: v, mj: int32(mm)}
			}
		}
	}
	x.memo[k] = best
	return best.v, true
}

// spread bounds, for class j under the node's bounds, how its job-rounds
// can spread over the rounds. Every round holds at least as many of the
// class's jobs as there are jobs running in all T rounds, and at most as
// many as there are jobs running at all; over every vector of round counts
// with a given total both are extreme for the most balanced vector (raise
// the smallest counts first), which is what these fields describe.
type spread struct {
	full int // jobs whose lower bound is T
	edge int // total up to which no further job need reach T
	busy int // jobs whose lower bound is positive
	idle int // jobs that may run but need not
	fc   int // forced job-rounds Σ lo
}

func (x *strongRelaxer) spreadOf(j int) spread {
	var sp spread
	T := x.m.in.T
	for _, c := range x.m.classes[j].jobs {
		lo, hi := x.lo[c], x.hi[c]
		sp.fc += lo
		sp.edge += min(max(T-1, lo), hi)
		switch {
		case lo == T:
			sp.full++
			sp.busy++
		case lo > 0:
			sp.busy++
		case hi > 0:
			sp.idle++
		}
	}
	return sp
}

// advance writes to next (sorted ascending) the most balanced profile that
// u job-rounds of class j can give when added to prof: between f and b of
// the class's jobs per round (the spread bounds), water-filled. False if
// they cannot fit.
func (x *strongRelaxer) advance(j int, prof, next []int, u int, sp spread) bool {
	T, w, G := x.m.in.T, x.m.classes[j].width, x.m.in.G
	f := sp.full + max(0, u-sp.edge)
	b := sp.busy + min(sp.idle, u-sp.fc)
	rest, room := u-f*T, b-f
	if rest < 0 || rest > room*T {
		return false
	}
	for t, p := range prof {
		next[t] = p + f*w
	}
	lvl := x.waterLevel(next, rest, room, w)
	for _, p := range next {
		rest -= min(room, max(0, (lvl-p)/w))
	}
	for t, p := range next {
		add := min(room, max(0, (lvl-p)/w))
		if rest > 0 && add < room && p+add*w == lvl {
			add++
			rest--
		}
		if next[t] = p + add*w; next[t] > G {
			return false
		}
	}
	for i := 1; i < len(next); i++ { // nearly sorted: lower rounds got more
		for k := i; k > 0 && next[k] < next[k-1]; k-- {
			next[k], next[k-1] = next[k-1], next[k]
		}
	}
	return true
}

// gains runs the Gale–Ryser-constrained greedy of class j on profile prof:
// pre[m] is the forced gain plus the first m accepted optional gains; fc
// is the forced job-round count; pre is nil if the lower bounds alone do
// not fit. With n non-nil the first take accepted job-rounds are added to n.
func (x *strongRelaxer) gains(j int, prof []int, take int, n []int) (pre []float64, fc int) {
	cl := &x.m.classes[j]
	T, nj := x.m.in.T, len(cl.jobs)
	fg, fc, fits := x.start(j, prof)
	if !fits {
		return nil, fc
	}
	pre = append(x.pre[j][:0], fg)
	defer func() { x.pre[j] = pre }()
	for _, it := range cl.items {
		if n != nil && len(pre)-1 == take {
			break
		}
		c, a := int(it.job), int(it.n)
		if a != x.cur[c] || a >= x.hi[c] {
			continue
		}
		pos := 1 // the job's rank once its count is a+1
		for lvl := a + 1; lvl <= T; lvl++ {
			pos += x.cnt[lvl]
		}
		if slices.Min(x.slack[pos:]) < 1 {
			continue
		}
		for q := pos; q <= nj; q++ {
			x.slack[q]--
		}
		x.cnt[a]--
		x.cnt[a+1]++
		x.cur[c]++
		if n != nil {
			n[c]++
		}
		pre = append(pre, pre[len(pre)-1]+it.gain)
	}
	return pre, fc
}

// start sets the greedy of class j at its lower bounds: the counts by
// level, and slack[q] = φ(q) − (sum of the q largest counts), q = 1..n_j.
// It returns the forced gain and job-rounds, and whether they fit.
func (x *strongRelaxer) start(j int, prof []int) (fg float64, fc int, fits bool) {
	m, cl := x.m, &x.m.classes[j]
	nj := len(cl.jobs)
	x.slack = slices.Grow(x.slack[:0], nj+1)[:nj+1]
	clear(x.slack)
	for _, p := range prof {
		s := (m.in.G - p) / cl.width
		for q := 1; q <= min(s, nj); q++ {
			x.slack[q] += q
		}
		for q := s + 1; q <= nj; q++ {
			x.slack[q] += s
		}
	}
	clear(x.cnt)
	for _, c := range cl.jobs {
		x.cnt[x.lo[c]]++
		x.cur[c] = x.lo[c]
		fc += x.lo[c]
		fg += m.jobs[c].cum[x.lo[c]]
	}
	top, q := 0, 0
	for lvl := m.in.T; lvl >= 0; lvl-- {
		for k := 0; k < x.cnt[lvl]; k++ {
			q++
			top += lvl
			if x.slack[q] -= top; x.slack[q] < 0 {
				return fg, fc, false
			}
		}
	}
	return fg, fc, true
}

// waterLevel returns the largest level L (next[0] plus a multiple of w)
// with need(L) = Σ_t min(room, max(0, (L − b_t)/w)) ≤ rest, for loads b
// sorted ascending and multiples of w, sweeping the points where a round
// starts filling (b_t) or is full (b_t + room·w).
func (x *strongRelaxer) waterLevel(b []int, rest, room, w int) int {
	T := len(b)
	lvl, acc, active, i, j := b[0], 0, 0, 0, 0
	for i < T || j < i {
		for i < T && b[i] == lvl {
			i, active = i+1, active+1
		}
		for j < i && b[j]+room*w == lvl {
			j, active = j+1, active-1
		}
		next := -1
		if i < T {
			next = b[i]
		}
		if j < i && (next < 0 || b[j]+room*w < next) {
			next = b[j] + room*w
		}
		if next < 0 {
			break
		}
		steps := (next - lvl) / w
		if active > 0 && acc+active*steps > rest {
			return lvl + (rest-acc)/active*w
		}
		acc += active * steps
		lvl = next
	}
	return lvl
}

// key identifies a state for the memo: the class and the profile; for the
// narrowest class only φ(1..n_j) matters, which many profiles share.
func (x *strongRelaxer) key(j int, prof []int) string {
	b := make([]byte, 0, 1+4*len(prof))
	b = append(b, byte(j))
	if cl := &x.m.classes[j]; j == len(x.m.classes)-1 {
		// φ(q) = φ(q−1) + #{t : s_t ≥ q}; prof ascending means slots descending.
		phi, t := 0, len(prof)
		for q := 1; q <= len(cl.jobs); q++ {
			for t > 0 && (x.m.in.G-prof[t-1])/cl.width < q {
				t--
			}
			phi += t
			b = append(b, byte(phi), byte(phi>>8), byte(phi>>16), byte(phi>>24))
		}
		return string(b)
	}
	for _, p := range prof {
		b = append(b, byte(p), byte(p>>8))
	}
	return string(b)
}
