package market

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// exactPackBudget bounds the search of one exact packing check, and
// exactPackTotal all of them in one solve phase (used only when the gang
// widths do not form a divisibility chain). Past them a check is unanswered.
const (
	exactPackBudget = 20000
	exactPackTotal  = 200000
)

// packer places round counts n into the T rounds of G GPUs: job c must run
// in n_c distinct rounds and no round may hold more than G GPUs of gangs.
//
// greedy takes the jobs widest first (then most rounds, then canonical
// order) and puts each into the n_c rounds with the most free GPUs. When the
// widths form a divisibility chain (1, 2, 4, 8, …) this is exact: everything
// placed before a job uses multiples of its width, so each round's free
// capacity counts whole slots of that width, and putting each job where the
// most slots are left keeps the slot counts as balanced as possible, which
// is what every later (narrower) job needs (a Gale–Ryser argument);
// TestPack_GreedyExactOnChains checks it against exhaustive search. For
// other widths a failed greedy is followed by an exhaustive search.
type packer struct {
	m     *model
	T, G  int
	free  []int
	on    []bool // on[c·T+t]: job c runs in round t
	order []int
	idx   []int // rounds by free desc, index asc

	// sortOrder's counting sort: distinct widths, widest first; each
	// job's index among them; the buckets' starts.
	widths, rank, bucket []int

	tmp   []int
	memo  map[string]bool
	nodes int
	limit int // nodes allowed to the current exhaustive search
	spent int // nodes of all exhaustive searches

	checks int
}

func newPacker(m *model) *packer {
	return &packer{m: m, T: m.in.T, G: m.in.G, free: make([]int, m.in.T),
		on: make([]bool, len(m.jobs)*m.in.T), idx: make([]int, m.in.T)}
}

func (p *packer) reset() {
	for t := range p.free {
		p.free[t] = p.G
		p.idx[t] = t
	}
	clear(p.on)
}

// sortOrder orders the jobs with n_c > 0: widest first, then most rounds,
// then canonical index. It is a counting sort over (width, rounds) buckets
// filled in canonical order, the order a comparison sort by those three
// keys gives.
func (p *packer) sortOrder(n []int) {
	if p.rank == nil {
		p.rankWidths()
	}
	T1 := p.T + 1
	if cap(p.bucket) < len(p.widths)*T1+1 {
		p.bucket = make([]int, len(p.widths)*T1+1)
	}
	start := p.bucket[:len(p.widths)*T1+1]
	clear(start)
	total := 0
	for c, k := range n {
		if k > 0 {
			start[p.rank[c]*T1+p.T-min(k, p.T)+1]++
			total++
		}
	}
	for b := 1; b < len(start); b++ {
		start[b] += start[b-1]
	}
	p.order = slices.Grow(p.order[:0], total)[:total]
	for c, k := range n {
		if k > 0 {
			b := p.rank[c]*T1 + p.T - min(k, p.T)
			p.order[start[b]] = c
			start[b]++
		}
	}
}

// rankWidths numbers the distinct gang widths, widest first (rank[c] for
// job c).
func (p *packer) rankWidths() {
	p.widths = p.widths[:0]
	for c := range p.m.jobs {
		if w := p.m.jobs[c].w; !slices.Contains(p.widths, w) {
			p.widths = append(p.widths, w)
		}
	}
	slices.Sort(p.widths)
	slices.Reverse(p.widths)
	p.rank = make([]int, len(p.m.jobs))
	for c := range p.m.jobs {
		p.rank[c] = slices.Index(p.widths, p.m.jobs[c].w)
	}
}

// greedy packs n. It returns the position in p.order of the first job that
// did not fit, or −1. With partial set a job that does not fit takes the
// rounds it can get and n is lowered accordingly; the result is then −1.
func (p *packer) greedy(n []int, partial bool) int {
	p.reset()
	p.sortOrder(n)
	for pos, c := range p.order {
		w := p.m.jobs[c].w
		avail := 0
		for avail < p.T && p.free[p.idx[avail]] >= w {
			avail++
		}
		k := n[c]
		if avail < k {
			if !partial {
				return pos
			}
			k = avail
			n[c] = k
		}
		for _, t := range p.idx[:k] {
			p.free[t] -= w
			p.on[c*p.T+t] = true
		}
		p.resort(k)
	}
	return -1
}

// resort restores the (free desc, index asc) order of p.idx after its first
// k rounds each lost the same capacity: it merges the two sorted runs.
func (p *packer) resort(k int) {
	if k == 0 || k == p.T {
		return
	}
	p.tmp = append(p.tmp[:0], p.idx...)
	a, b := p.tmp[:k], p.tmp[k:]
	for i := range p.idx {
		if len(b) == 0 || (len(a) > 0 && p.less(a[0], b[0])) {
			p.idx[i], a = a[0], a[1:]
		} else {
			p.idx[i], b = b[0], b[1:]
		}
	}
}

func (p *packer) less(a, b int) bool {
	return p.free[a] > p.free[b] || (p.free[a] == p.free[b] && a < b)
}

// check reports whether n packs and whether the answer is proven (an
// exhaustive search may run out of budget). It leaves no placement when
// the widths form a chain; place does.
func (p *packer) check(n []int) (ok, proven bool) {
	if p.m.chain {
		p.checks++
		return p.fits(n), true
	}
	return p.place(n)
}

// place is check, leaving the placement of a packable n in p.on (and the
// free GPUs of each round in p.free).
func (p *packer) place(n []int) (ok, proven bool) {
	p.checks++
	if p.greedy(n, false) < 0 {
		return true, true
	}
	if p.m.chain {
		return false, true
	}
	return p.exact(n)
}

// fits reports whether greedy(n, false) would succeed, for widths that
// form a chain, without placing the narrowest width's jobs: the wider jobs
// are placed as greedy places them; then the narrowest jobs (greedy takes
// them by rounds descending, each into the rounds with the most free
// GPUs, i.e. the most free slots s_t = ⌊free_t/w⌋) fit iff the
// Gale–Ryser condition holds: the k largest counts sum to at most
// Σ_t min(s_t, k), for every k. (That greedy is Ryser's construction,
// which succeeds exactly when the condition holds.)
func (p *packer) fits(n []int) bool {
	p.reset()
	p.sortOrder(n)
	last := len(p.order)
	for last > 0 && p.m.jobs[p.order[last-1]].w == p.m.jobs[p.order[len(p.order)-1]].w {
		last--
	}
	for i := 0; i < last; { // a bucket of jobs of one width and one count at a time
		c := p.order[i]
		w, k := p.m.jobs[c].w, n[c]
		j := i + 1
		for j < last && p.m.jobs[p.order[j]].w == w && n[p.order[j]] == k {
			j++
		}
		if j == i+1 && !p.take(c, k) || j > i+1 && !p.takeMany(w, k, j-i) {
			return false
		}
		i = j
	}
	rest := p.order[last:]
	if len(rest) == 0 {
		return true
	}
	w := p.m.jobs[rest[0]].w
	slots := p.tmp[:0]
	for _, f := range p.free {
		slots = append(slots, f/w)
	}
	slices.Sort(slots)
	slices.Reverse(slots)
	p.tmp = slots
	sum, phi, covered := 0, 0, len(slots) // covered: rounds with s_t ≥ k
	for k, c := range rest {              // rest is by rounds descending
		for covered > 0 && slots[covered-1] < k+1 {
			covered--
		}
		sum += n[c]
		phi += covered
		if sum > phi {
			return false
		}
	}
	return true
}

// take puts job c into the k rounds with the most free GPUs (greedy's
// step); false if fewer than k rounds have room for it.
func (p *packer) take(c, k int) bool {
	w := p.m.jobs[c].w
	avail := 0
	for avail < p.T && p.free[p.idx[avail]] >= w {
		avail++
	}
	if avail < k {
		return false
	}
	for _, t := range p.idx[:k] {
		p.free[t] -= w
		p.on[c*p.T+t] = true
	}
	p.resort(k)
	return true
}

// takeMany is m takes of jobs of width w and k rounds each, as fits needs
// them: whether they all succeed, and the free GPUs they leave as a
// multiset (which rounds hold which count is not kept: rounds of equal
// capacity are interchangeable for every later take and for the
// Gale–Ryser test, so fits gives the same answer). On a chain every round's
// capacity is r + w·s_t with one r < w, s_t slots of width w. m jobs of k
// rounds each fit iff Σ_t min(s_t, m) ≥ m·k (the Gale–Ryser condition for
// equal counts: the test for fewer jobs follows, the left side being
// concave in m), and then greedy, each job taking the k rounds with the
// most slots, leaves the slots levelled from the top: with L the least
// level at which D(L) = Σ_t min(m, max(0, s_t − L)) ≤ m·k, every round
// loses min(m, max(0, s_t − L)) slots and m·k − D(L) of the rounds left
// at L with fewer than m taken lose one more. (TestPack_TakeManyLeavesWhatTakesLeave
// checks both against m takes.)
func (p *packer) takeMany(w, k, m int) bool {
	s := p.tmp[:0]
	fit, top := 0, 0
	for _, f := range p.free {
		s = append(s, f/w)
		fit += min(f/w, m)
		top = max(top, f/w)
	}
	p.tmp = s
	if fit < m*k {
		return false
	}
	taken := func(L int) int {
		d := 0
		for _, x := range s {
			d += min(m, max(0, x-L))
		}
		return d
	}
	lo, hi := 0, top // taken(top) = 0 ≤ m·k
	for lo < hi {
		if mid := (lo + hi) / 2; taken(mid) <= m*k {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	extra := m*k - taken(lo)
	for t := range p.free {
		d := min(m, max(0, s[t]-lo))
		if extra > 0 && s[t]-d == lo && d < m {
			d, extra = d+1, extra-1
		}
		p.free[t] -= d * w
	}
	slices.SortFunc(p.idx, func(a, b int) int {
		switch {
		case a == b:
			return 0
		case p.less(a, b):
			return -1
		}
		return 1
	})
	return true
}

// exact decides packability by depth-first search over the jobs in greedy
// order, choosing how many of a job's rounds go to each group of rounds with
// equal free capacity (rounds with equal capacity are interchangeable).
func (p *packer) exact(n []int) (ok, proven bool) {
	p.reset()
	p.sortOrder(n)
	p.memo = map[string]bool{}
	p.nodes = 0
	p.limit = min(exactPackBudget, exactPackTotal-p.spent)
	ok = p.dfs(n, 0)
	p.spent += min(p.nodes, p.limit)
	return ok, ok || p.nodes <= p.limit
}

func (p *packer) dfs(n []int, pos int) bool {
	if pos == len(p.order) {
		return true
	}
	if p.nodes++; p.nodes > p.limit {
		return false
	}
	key := p.stateKey(pos)
	if p.memo[key] {
		return false
	}
	c := p.order[pos]
	w := p.m.jobs[c].w
	var eligible []int
	for t := range p.free {
		if p.free[t] >= w {
			eligible = append(eligible, t)
		}
	}
	slices.SortStableFunc(eligible, func(a, b int) int { return cmp.Compare(p.free[b], p.free[a]) })
	if len(eligible) >= n[c] && p.choose(n, pos, eligible, 0, n[c]) {
		return true
	}
	p.memo[key] = true
	return false
}

// choose picks `need` rounds from eligible[from:], taking a count from each
// run of equal free capacity (first rounds of the run), then recurses.
func (p *packer) choose(n []int, pos int, eligible []int, from, need int) bool {
	if need == 0 {
		return p.dfs(n, pos+1)
	}
	if from >= len(eligible) || len(eligible)-from < need {
		return false
	}
	end := from
	for end < len(eligible) && p.free[eligible[end]] == p.free[eligible[from]] {
		end++
	}
	c := p.order[pos]
	w := p.m.jobs[c].w
	for k := min(need, end-from); k >= 0; k-- {
		for _, t := range eligible[from : from+k] {
			p.free[t] -= w
			p.on[c*p.T+t] = true
		}
		if p.choose(n, pos, eligible, end, need-k) {
			return true
		}
		for _, t := range eligible[from : from+k] {
			p.free[t] += w
			p.on[c*p.T+t] = false
		}
	}
	return false
}

func (p *packer) stateKey(pos int) string {
	f := slices.Clone(p.free)
	slices.Sort(f)
	var b strings.Builder
	b.WriteString(strconv.Itoa(pos))
	for _, v := range f {
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(v))
	}
	return b.String()
}

// conflict returns jobs J such that no packing gives every c ∈ J its n_c
// rounds (n itself must be proven unpackable). Every packable allocation
// therefore has n'_c < n_c for some c ∈ J. J is shrunk by deletion when
// small.
func (p *packer) conflict(n []int) []int {
	var J []int
	if p.m.chain {
		fail := p.greedy(n, false)
		J = slices.Clone(p.order[:fail+1])
	} else {
		for c := range n {
			if n[c] > 0 {
				J = append(J, c)
			}
		}
	}
	if len(J) > 16 {
		return J
	}
	sub := make([]int, len(n))
	for i := len(J) - 1; i >= 0; i-- {
		clear(sub)
		for _, c := range J {
			sub[c] = n[c]
		}
		sub[J[i]] = 0
		if ok, proven := p.check(sub); !ok && proven {
			J = slices.Delete(J, i, i+1)
		}
	}
	return J
}
