package market

import "slices"

// The class relaxation. Any allocation that packs into the rounds meets, for
// every width class j (widest first), the cut
//
//	Σ_{classes l ≤ j} w_l·m_l ≤ cap_j = T · (largest sum ≤ G of widths of classes ≤ j),
//
// where m_l is the class's total job-rounds: in one round the gangs of width
// ≥ w_j occupy a sum of such widths, which cannot exceed that largest sum.
// Within a class all job-rounds cost the same, so the best use of m
// job-rounds is the m best marginal gains: H_j(m), concave in m. The
// relaxation maximizes Σ_j H_j(m_j) under the nested cuts, exactly, by a
// dynamic program over the GPU-rounds used by the wider classes:
//
//	F_j(S) = max_m F_{j−1}(S − w_j·m) + H_j(m),
//
// a max-plus convolution with a concave function, whose arg-max is monotone
// in S, so each residue class of S mod w_j is solved by divide and conquer in
// O(S/w_j · log) evaluations. F_j is "best with at most S GPU-rounds", so
// it is nondecreasing; for the last class only S = cap is needed.

// relaxer holds the buffers of the class relaxation.
type relaxer struct {
	m   *model
	fc  []int       // forced job-rounds Σ lo per class
	fg  []float64   // forced gain per class
	pre [][]float64 // prefix sums of the optional gains per class
	val [][]float64 // F_j over states S = k·step_j
	arg [][]int32   // the m_j attaining F_j
	mj  []int

	// current convolution
	cur  int
	prev []float64
	res  int       // residue r of S mod w
	ext  []float64 // ext[o] = F_{j−1}(r + w·o), o = 0..qmax
	plat []int     // plat[o]: the least o' with ext[o'] + c = ext[o] + c (see convolve)
	mono bool      // ext[o] + c is nondecreasing in o
	// plain turns the flat-range step of divide off (tests compare both).
	plain bool
}

func newRelaxer(m *model) *relaxer {
	k := len(m.classes)
	x := &relaxer{m: m, fc: make([]int, k), fg: make([]float64, k),
		pre: make([][]float64, k), val: make([][]float64, k), arg: make([][]int32, k), mj: make([]int, k)}
	for j := range m.classes {
		cl := &m.classes[j]
		x.pre[j] = make([]float64, 0, len(cl.items)+1)
		if j < k-1 {
			x.val[j] = make([]float64, cl.cap/cl.step+1)
			x.arg[j] = make([]int32, cl.cap/cl.step+1)
		}
	}
	return x
}

// solve maximizes the hull utility above the base under lo ≤ n ≤ hi and the
// class cuts. It writes the maximizer to n and reports false if the bounds
// violate a cut.
func (x *relaxer) solve(lo, hi, n []int) (float64, bool) {
	m := x.m
	used := 0
	for j := range m.classes {
		cl := &m.classes[j]
		x.fc[j], x.fg[j] = 0, 0
		for _, c := range cl.jobs {
			x.fc[j] += lo[c]
			x.fg[j] += m.jobs[c].cum[lo[c]]
		}
		used += cl.width * x.fc[j]
		if used > cl.cap {
			return negInf, false
		}
		p := x.pre[j][:1]
		p[0] = 0
		for _, it := range cl.items {
			if int(it.n) >= lo[it.job] && int(it.n) < hi[it.job] {
				p = append(p, p[len(p)-1]+it.gain)
			}
		}
		x.pre[j] = p
	}
	copy(n, lo)
	k := len(m.classes)
	if k == 0 {
		return 0, true
	}
	for j := 0; j < k-1; j++ {
		x.convolve(j)
	}
	last := &m.classes[k-1]
	best, bm := x.scan(k-1, last.cap)
	if best == negInf {
		return negInf, false
	}
	x.mj[k-1] = bm
	s := last.cap - last.width*bm
	for j := k - 2; j >= 0; j-- {
		cl := &m.classes[j]
		idx := min(s, cl.cap) / cl.step
		x.mj[j] = int(x.arg[j][idx])
		s = idx*cl.step - cl.width*x.mj[j]
	}
	for j := range m.classes {
		x.expand(j, lo, hi, n)
	}
	return best, true
}

// h is H_j(m): the forced gain plus the best m − fc optional gains.
func (x *relaxer) h(j, mm int) float64 {
	f := x.fc[j]
	if mm < f {
		return negInf
	}
	p := x.pre[j]
	return x.fg[j] + p[min(mm-f, len(p)-1)]
}

// fprev is F_{j−1}(s) for the current class j (0 below the widest class).
func (x *relaxer) fprev(s int) float64 {
	if x.cur == 0 {
		return 0
	}
	cl := &x.m.classes[x.cur-1]
	return x.prev[min(s, cl.cap)/cl.step]
}

// scan evaluates F_j(s) directly over all m.
func (x *relaxer) scan(j, s int) (float64, int) {
	x.cur = j
	if j > 0 {
		x.prev = x.val[j-1]
	}
	w := x.m.classes[j].width
	best, bm := negInf, 0
	for mm := s / w; mm >= x.fc[j]; mm-- {
		v := x.fprev(s-w*mm) + x.h(j, mm)
		if v > best {
			best, bm = v, mm
		}
	}
	return best, bm
}

// convolve fills F_j for every state S = k·step_j ≤ cap_j.
func (x *relaxer) convolve(j int) {
	cl := &x.m.classes[j]
	x.cur = j
	if j > 0 {
		x.prev = x.val[j-1]
	}
	for r := 0; r < cl.width; r += cl.step {
		if r > cl.cap {
			break
		}
		x.res = r
		qmax := (cl.cap - r) / cl.width
		x.ext = slices.Grow(x.ext[:0], qmax+1)[:qmax+1]
		x.plat = slices.Grow(x.plat[:0], qmax+1)[:qmax+1]
		// The plateaus are those of the values divide compares where every
		// optional job-round is taken, ext[o] + (fg + pre[last]), so that
		// values equal after rounding share one.
		c := x.fg[j] + x.pre[j][len(x.pre[j])-1]
		x.mono = !x.plain
		for o := range x.ext {
			x.ext[o] = x.fprev(r + cl.width*o)
			switch v := x.ext[o] + c; {
			case o == 0 || v != x.ext[o-1]+c:
				x.plat[o] = o
				x.mono = x.mono && (o == 0 || v > x.ext[o-1]+c)
			default:
				x.plat[o] = x.plat[o-1]
			}
		}
		x.divide(0, qmax, 0, qmax)
	}
}

// divide solves F_j(r + w·q) for q ∈ [q0, q1] knowing that the optimal
// q' = q − m lies in [o0, o1] (monotone arg-max of a concave convolution).
func (x *relaxer) divide(q0, q1, o0, o1 int) {
	if q0 > q1 {
		return
	}
	cl := &x.m.classes[x.cur]
	w, f := cl.width, x.fc[x.cur]
	q := (q0 + q1) / 2
	best, bo := negInf, o0
	fg, pre, ext := x.fg[x.cur], x.pre[x.cur], x.ext
	last := len(pre) - 1
	top := min(o1, q-f)
	o := o0
	if flat := min(q-f-last, top); x.mono && flat >= o0 {
		// For o ≤ flat all optional job-rounds are taken, so H is its
		// maximum and the value is ext[o] plus a constant: with those
		// values nondecreasing, the first o of the scan below to reach
		// their largest is where the plateau of flat's value starts.
		s := max(o0, x.plat[flat])
		best, bo = ext[s]+(fg+pre[last]), s
		o = flat + 1
	}
	for ; o <= top; o++ {
		// x.h(x.cur, q−o), inlined (q − o ≥ f here)
		if v := ext[o] + (fg + pre[min(q-o-f, last)]); v > best {
			best, bo = v, o
		}
	}
	k := (x.res + w*q) / cl.step
	x.val[x.cur][k] = best
	x.arg[x.cur][k] = int32(q - bo)
	x.divide(q0, q-1, o0, bo)
	x.divide(q+1, q1, bo, o1)
}

// expand turns the class total m_j into round counts: lo plus the first
// m_j − fc optional job-rounds in gain order.
func (x *relaxer) expand(j int, lo, hi, n []int) {
	cl := &x.m.classes[j]
	take := min(x.mj[j], x.fc[j]+len(x.pre[j])-1) - x.fc[j]
	for _, it := range cl.items {
		if take == 0 {
			return
		}
		if int(it.n) >= lo[it.job] && int(it.n) < hi[it.job] {
			n[it.job]++
			take--
		}
	}
}
