package market

import (
	"cmp"
	"math/bits"
	"slices"
)

// arrangement orders a packed placement in time (the re-rank step of §4.5,
// applied to every solve; see the package doc). The market objective and
// the FTF constraints depend only on the round counts, so any placement of
// them is optimal; this one runs first the jobs with the highest
// priority-weighted urgency per planned round.
type arrangement struct {
	T, G int
	w    []int
	pos  []int // pos[c]: rank of job c, 0 = highest priority
	on   []bool
	free []int
	rank []int // rank[r]: the job of rank r
	// set[t] holds bit r when the job of rank r runs in round t.
	set [][]uint64
	// The same sets split by gang width, so that move scans only the jobs
	// whose width can fit: group[c] is job c's width group, gw[g] its
	// range of widths (one group per width, or one for all widths when
	// there are many), gset[g][t] the group's part of set[t], and
	// gnz[g][t] bit k when gset[g][t][k] is not zero (to skip empty words
	// 64 at a time).
	group []int
	gw    [][2]int
	gset  [][][]uint64
	gnz   [][][]uint64
	// failed records that move(c, early, late) failed for a job c of
	// width group g, until a later move may have made it possible
	// (touched): bit early of row (g, late), rows of rw words. move reads
	// only those two rounds' state, c's width and c's rank; jobs are
	// advanced in rank order, so a later job of the same width has only
	// fewer candidates (ranks below its own) and would fail again: advance
	// skips the pair.
	// When a group holds several widths (many distinct widths), the
	// records are kept for the job being advanced only.
	failed []uint64
	rw     int
	mine   []uint64 // the rounds of the job being advanced
	// swapped is the job the last successful move swapped out of its
	// early round, −1 for a move into free room.
	swapped int
}

// arrange returns the placement ordered in time: on[c·T+t] when canonical
// job c runs in future round t.
func arrange(in *instance, m *model, n []int, on []bool) []bool {
	N, T := len(n), in.T
	a := &arrangement{T: T, G: in.G, w: make([]int, N), pos: make([]int, N), on: slices.Clone(on), free: make([]int, T)}
	for c := range n {
		a.w[c] = m.jobs[c].w
	}
	// The re-rank objective weighs each of job c's rounds by π_c/n_c; the
	// key multiplies that by ρ̃_c, so that among jobs still within their
	// fair share (π = 1) the one nearest its target goes first. Ties: π,
	// ρ̃ and n descending, then canonical index (a total order).
	order := make([]ranked, N)
	for c := range order {
		order[c] = ranked{false, in.prio[c] * in.rho[c] / float64(max(n[c], 1)), in.prio[c], in.rho[c], n[c], c}
		if in.tight {
			order[c].later, order[c].key = in.tightRank(&m.jobs[c], m.ftfLo(c), n[c], in.prio[c]*in.rho[c])
		}
	}
	if !sortRankedByGroups(order, m.rep, n) {
		slices.SortFunc(order, compareRanked)
	}
	rank := make([]int, N)
	for r, o := range order {
		rank[r] = o.c
		a.pos[o.c] = r
	}
	a.rank = rank
	a.orderRounds(rank)
	for _, c := range rank {
		if n[c] > 0 {
			a.advance(c)
		}
	}
	return a.on
}

// ranked is a job's place in arrange's ranking.
type ranked struct {
	later          bool
	key, prio, rho float64
	n, c           int
}

// compareRanked is arrange's order: later last, then key, π, ρ̃ and n
// descending, then canonical index.
func compareRanked(x, y ranked) int {
	if d := compareTuple(&x, &y); d != 0 {
		return d
	}
	return cmp.Compare(x.c, y.c)
}

// compareTuple is compareRanked without the canonical index.
func compareTuple(x, y *ranked) int {
	if x.later != y.later {
		return cmp.Compare(btoi(x.later), btoi(y.later))
	}
	if d := cmp.Compare(y.key, x.key); d != 0 {
		return d
	}
	if d := cmp.Compare(y.prio, x.prio); d != 0 {
		return d
	}
	if d := cmp.Compare(y.rho, x.rho); d != 0 {
		return d
	}
	return cmp.Compare(y.n, x.n)
}

// sortRankedByGroups sorts order (order[c] is job c's) as compareRanked
// does when the jobs fall into few groups of equal representative (twin.go)
// and round count, whose entries are then equal but for c: it sorts one
// entry per group, ranks the groups (groups whose entries compare equal
// share a rank), and lays the jobs out by rank, each rank's in canonical
// order. It reports false, leaving order as it was, when there are many
// groups (or no representatives).
func sortRankedByGroups(order []ranked, rep []int32, n []int) bool {
	N := len(order)
	if rep == nil || N < 64 {
		return false
	}
	group := make([]int32, N)
	first := make(map[int64]int32)
	var heads []int // a job of each group
	for c := range order {
		k := int64(rep[c])<<32 | int64(uint32(n[c]))
		g, ok := first[k]
		if !ok {
			if len(heads) >= N/8 {
				return false
			}
			g = int32(len(heads))
			first[k] = g
			heads = append(heads, c)
		}
		group[c] = g
	}
	byTuple := make([]int32, len(heads))
	for g := range byTuple {
		byTuple[g] = int32(g)
	}
	slices.SortFunc(byTuple, func(a, b int32) int { return compareTuple(&order[heads[a]], &order[heads[b]]) })
	rank := make([]int, len(heads))
	r := 0
	for i, g := range byTuple {
		if i > 0 && compareTuple(&order[heads[byTuple[i-1]]], &order[heads[g]]) != 0 {
			r++
		}
		rank[g] = r
	}
	start := make([]int, r+2)
	for c := range order {
		start[rank[group[c]]+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	sorted := make([]ranked, N)
	for c := range order { // canonical order within a rank
		i := &start[rank[group[c]]]
		sorted[*i] = order[c]
		*i++
	}
	copy(order, sorted)
	return true
}

// tightRank is a job's rank under FairnessTightest: whether it ranks after
// the jobs that finish in the window, and its key within its group (see
// the package doc). Only the current round of a window is ever run; the
// plan is solved again before the next. A job that finishes within its n
// rounds was judged by the end of its n-th round (ftfAt), so its rounds are
// due first, ordered as the relaxation's re-rank orders them (π·ρ̃/n). Any
// other job meets its bounds wherever its rounds lie; the π/n weight would
// rank it the later the more rounds it needs, and a job planned for most
// rounds of every window would then miss the current one every time (the
// next plan defers it again). Its key is π·ρ̃/(T − lo + 1) instead: the
// rounds it may still skip in the window under its lower bound lo (FTF and
// critical), plus one.
func (in *instance) tightRank(jm *jobModel, lo, n int, prioRho float64) (later bool, key float64) {
	if jm.r[n] <= 0 {
		return false, prioRho / float64(max(n, 1))
	}
	return true, prioRho / float64(in.T-max(lo, 0)+1)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// orderRounds permutes the rounds (a permutation keeps every round's
// contents, so the placement still packs): the round holding the
// highest-ranked jobs comes first, comparing the sorted ranks of the jobs
// of two rounds lexicographically (a round that extends another comes first).
func (a *arrangement) orderRounds(rank []int) {
	T := a.T
	sig := make([][]int, T)
	for _, c := range rank {
		for t, on := range a.on[c*T : (c+1)*T] {
			if on {
				sig[t] = append(sig[t], a.pos[c])
			}
		}
	}
	perm := make([]int, T)
	for t := range perm {
		perm[t] = t
	}
	slices.SortStableFunc(perm, func(x, y int) int {
		s, u := sig[x], sig[y]
		for i := 0; i < min(len(s), len(u)); i++ {
			if s[i] != u[i] {
				return cmp.Compare(s[i], u[i])
			}
		}
		return cmp.Compare(len(u), len(s))
	})
	old := slices.Clone(a.on)
	for c := range a.w {
		for t, from := range perm {
			a.on[c*T+t] = old[c*T+from]
		}
	}
	a.groupWidths()
	a.rw = (T + 63) / 64
	a.failed, a.mine = make([]uint64, len(a.gw)*T*a.rw), make([]uint64, a.rw)
	words := (len(rank) + 63) / 64
	a.set = make([][]uint64, T)
	a.gset, a.gnz = make([][][]uint64, len(a.gw)), make([][][]uint64, len(a.gw))
	for g := range a.gw {
		a.gset[g], a.gnz[g] = make([][]uint64, T), make([][]uint64, T)
	}
	for t := range a.free {
		a.free[t] = a.G
		a.set[t] = make([]uint64, words)
		for g := range a.gw {
			a.gset[g][t] = make([]uint64, words)
			a.gnz[g][t] = make([]uint64, (words+63)/64)
		}
	}
	for r, c := range rank {
		for t, on := range a.on[c*T : (c+1)*T] {
			if on {
				a.free[t] -= a.w[c]
				a.add(t, r, a.group[c])
			}
		}
	}
}

// maxWidthGroups is the most gang widths that get a group each; beyond
// it all widths share one group.
const maxWidthGroups = 8

// groupWidths assigns each job its width group.
func (a *arrangement) groupWidths() {
	var widths []int
	for _, w := range a.w {
		if !slices.Contains(widths, w) {
			widths = append(widths, w)
			if len(widths) > maxWidthGroups {
				break
			}
		}
	}
	a.group = make([]int, len(a.w))
	if len(widths) > maxWidthGroups {
		lo, hi := slices.Min(a.w), slices.Max(a.w)
		a.gw = [][2]int{{lo, hi}}
		return
	}
	slices.Sort(widths)
	for _, w := range widths {
		a.gw = append(a.gw, [2]int{w, w})
	}
	for c, w := range a.w {
		a.group[c] = slices.Index(widths, w)
	}
}

func (a *arrangement) add(t, r, g int) {
	a.set[t][r>>6] |= 1 << (r & 63)
	a.gset[g][t][r>>6] |= 1 << (r & 63)
	a.gnz[g][t][r>>12] |= 1 << ((r >> 6) & 63)
}

func (a *arrangement) remove(t, r, g int) {
	a.set[t][r>>6] &^= 1 << (r & 63)
	if a.gset[g][t][r>>6] &^= 1 << (r & 63); a.gset[g][t][r>>6] == 0 {
		a.gnz[g][t][r>>12] &^= 1 << ((r >> 6) & 63)
	}
}

// advance moves job c's rounds earlier while it can: into an earlier round
// with room, or by swapping with a lower-ranked job of that round that fits
// into c's later round. Lower-ranked jobs only ever move later, so a job's
// rounds, once advanced, stay put. The scan restarts after every move; the
// pairs of rounds whose move failed and that no move since can have made
// possible are skipped, which changes nothing but the time (see
// arrangement.failed and touched).
func (a *arrangement) advance(c int) {
	T, rw := a.T, a.rw
	g := a.group[c]
	if a.gw[g][0] != a.gw[g][1] {
		clear(a.failed) // several widths share the group
	}
	failed := a.failed[g*T*rw : (g+1)*T*rw]
	mine := a.mine
	clear(mine)
	for t := range T {
		if a.on[c*T+t] {
			mine[t>>6] |= 1 << (t & 63)
		}
	}
	for moved := true; moved; {
		moved = false
		for late := T - 1; late > 0 && !moved; late-- {
			if mine[late>>6]&(1<<(late&63)) == 0 {
				continue
			}
			row := failed[late*rw : (late+1)*rw]
			for k := 0; k <= (late-1)>>6 && !moved; k++ {
				cand := ^mine[k] &^ row[k] // rounds early: c is not in, not failed
				if k == late>>6 {
					cand &= 1<<(late&63) - 1 // early < late
				}
				for cand != 0 {
					early := k<<6 | bits.TrailingZeros64(cand)
					cand &= cand - 1
					if moved = a.move(c, early, late); moved {
						a.touched(a.w[c], early, late)
						mine[late>>6] &^= 1 << (late & 63)
						mine[early>>6] |= 1 << (early & 63)
						break
					}
					row[k] |= 1 << (early & 63)
				}
			}
		}
	}
}

// touched forgets the failed pairs that the move of a job of width w
// from round late to round early (swapping with the job a.swapped, if
// any) may have made possible, for every width group. A pair fails when
// round early has no room for the job and no fitting candidate (a job
// ranked below it, in early and not in late, of width in [w − free_early,
// free_late + w]); the jobs advanced later are ranked below c, so c is
// never their candidate. A pair can start to succeed only if its early
// round gains room or a candidate, or its late round gains room or loses a
// job that could be a candidate:
//
//   - a direct move frees room in round late only: the pairs with late as
//     their early or late round;
//   - a swap with job j puts j into round late (a new candidate there) and
//     takes it out of round early (so j ∉ early no longer hides j in the
//     other rounds): the pairs with late as early round and those with
//     early as late round; and, if j is wider than the job, round early
//     gains room (pairs with early as early round), if narrower, round
//     late does (pairs with late as late round).
//
// Every other pair still fails, so skipping it changes nothing.
func (a *arrangement) touched(w, early, late int) {
	j := a.swapped
	switch {
	case j < 0:
		a.forget(late, true, true)
	default:
		a.forget(late, true, a.w[j] < w)
		a.forget(early, a.w[j] > w, true)
	}
}

// forget clears the failed pairs whose early round is t (asEarly) and
// those whose late round is t (asLate), for every width group.
func (a *arrangement) forget(t int, asEarly, asLate bool) {
	T, rw := a.T, a.rw
	for g := range a.gw {
		f := a.failed[g*T*rw : (g+1)*T*rw]
		if asLate {
			clear(f[t*rw : (t+1)*rw])
		}
		if asEarly {
			for u := range T {
				f[u*rw+t>>6] &^= 1 << (t & 63)
			}
		}
	}
}

// move tries to put job c into round early instead of round late, directly
// or by swapping with the lowest-ranked job of round early that is ranked
// below c, is not in round late, and makes both rounds fit. The width
// groups are searched separately (each from the lowest rank up, for a
// rank below the best found so far); the lowest-ranked job found is the
// one a scan of all jobs from the lowest rank up would find first.
func (a *arrangement) move(c, early, late int) bool {
	w := a.w[c]
	a.swapped = -1
	if a.free[early] >= w {
		a.shift(c, late, early)
		return true
	}
	need, room := w-a.free[early], a.free[late]+w
	lo := a.pos[c] + 1 // the ranks below c's
	best := -1
	for g, ws := range a.gw {
		if ws[1] < need || ws[0] > room {
			continue
		}
		if r := a.lowest(g, early, late, max(lo, best+1), need, room); r > best {
			best = r
		}
	}
	if best < 0 {
		return false
	}
	a.swapped = a.rank[best]
	a.shift(a.swapped, early, late)
	a.shift(c, late, early)
	return true
}

// lowest returns the largest rank r ≥ lo of a job of width group g that
// runs in round early and not in round late and whose width is in [need,
// room], or −1.
func (a *arrangement) lowest(g, early, late, lo, need, room int) int {
	e, l, nz := a.gset[g][early], a.set[late], a.gnz[g][early]
	kLo := lo >> 6
	for s := len(nz) - 1; s >= kLo>>6; s-- {
		words := nz[s]
		if s == kLo>>6 {
			words &= ^uint64(0) << (kLo & 63)
		}
		for words != 0 {
			kb := 63 - bits.LeadingZeros64(words)
			words &^= 1 << kb
			k := s<<6 | kb
			word := e[k] &^ l[k]
			if k == kLo {
				word &= ^uint64(0) << (lo & 63)
			}
			for word != 0 {
				b := 63 - bits.LeadingZeros64(word)
				if j := a.rank[k<<6|b]; a.w[j] >= need && a.w[j] <= room {
					return k<<6 | b
				}
				word &^= 1 << b
			}
		}
	}
	return -1
}

func (a *arrangement) shift(c, from, to int) {
	a.on[c*a.T+from] = false
	a.on[c*a.T+to] = true
	a.free[from] += a.w[c]
	a.free[to] -= a.w[c]
	a.remove(from, a.pos[c], a.group[c])
	a.add(to, a.pos[c], a.group[c])
}
