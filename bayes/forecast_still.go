package bayes

import "math"

// stillEpochs finishes forecastRaw's recursion over the epochs from..E−1
// once no transition can move probability any more (staysPut holds from
// epoch from−1 on: the epoch steps are skipped, and every epoch only
// accumulates its time). It does what the loop does for those epochs, the
// same operations on the same values in the same order per level, with the
// level's moments in registers and the products that do not change from
// epoch to epoch computed once: x = w·d is d where the whole epoch remains
// (w = 1), so (2·x)·A + (x·x)·P and x·P take the same values each epoch.
// Levels do not interact while nothing moves, so they are finished one
// after the other. The bits are the loop's (TestForecast_StillEpochs…),
// but for a run of more than exactEpochs whole epochs, which is summed in
// closed form (a long job's: forecast_jump.go).
func stillEpochs(m *moments, N, dur *[maxLevels]float64, L, from, E int, pTotal float64) {
	for i := range L {
		p := m.P[i]
		if p == 0 {
			continue
		}
		a, b, n, d := m.A[i], m.B[i], N[i], dur[i]
		c2, t2, dp := 2*d, d*d*p, d*p
		e := from
		if k := wholeEpochs(from, E, pTotal); k > exactEpochs { // a long job's (forecast_jump.go): summed
			fk := float64(k)
			b += fk*(c2*a+t2) + c2*dp*fk*(fk-1)/2
			a += fk * dp
			n += fk * p
			e += k
		}
		for ; e < E && !(float64(e+1) > pTotal); e++ { // w = 1
			b += c2*a + t2
			a += dp
			n += p
		}
		for ; e < E; e++ { // the last, partial epochs
			w := pTotal - float64(e)
			if w < 0 {
				w = 0
			}
			x := w * d
			b += 2*x*a + x*x*p
			a += x * p
			n += w * p
		}
		m.A[i], m.B[i], N[i] = a, b, n
	}
}

// stillMemo is a job's last still tail: its inputs and results for every
// level that held probability. A job whose forecast inputs did not move
// since the round before (one that waited, in a cluster whose families
// taught nothing it reads) enters the tail with the same moments, and the
// tail is then looked up instead of run: the results are those of the
// same operations on the same inputs, compared bit for bit.
type stillMemo struct {
	from, E int
	pTotal  uint64 // bits
	lv      []stillLevel
}

// stillLevel is one level's inputs (the bits of P, A, B, N and the
// duration) and results (A, B, N).
type stillLevel struct {
	i       int
	in      [5]uint64
	a, b, n float64
}

func stillInputs(m *moments, N, dur *[maxLevels]float64, i int) [5]uint64 {
	return [5]uint64{math.Float64bits(m.P[i]), math.Float64bits(m.A[i]), math.Float64bits(m.B[i]),
		math.Float64bits(N[i]), math.Float64bits(dur[i])}
}

// stillEpochsMemo is stillEpochs, answered from *memo when the call
// repeats the one remembered there; otherwise it runs stillEpochs and
// remembers the call.
func stillEpochsMemo(memo **stillMemo, m *moments, N, dur *[maxLevels]float64, L, from, E int, pTotal float64) {
	if c := *memo; c != nil && c.from == from && c.E == E && c.pTotal == math.Float64bits(pTotal) && c.repeats(m, N, dur, L) {
		for _, l := range c.lv {
			m.A[l.i], m.B[l.i], N[l.i] = l.a, l.b, l.n
		}
		return
	}
	c := *memo
	if c == nil {
		c = &stillMemo{}
		*memo = c
	}
	c.from, c.E, c.pTotal, c.lv = from, E, math.Float64bits(pTotal), c.lv[:0]
	for i := range L {
		if m.P[i] != 0 {
			c.lv = append(c.lv, stillLevel{i: i, in: stillInputs(m, N, dur, i)})
		}
	}
	stillEpochs(m, N, dur, L, from, E, pTotal)
	for k := range c.lv {
		l := &c.lv[k]
		l.a, l.b, l.n = m.A[l.i], m.B[l.i], N[l.i]
	}
}

// repeats reports whether the levels holding probability, and their
// inputs, are the remembered ones.
func (c *stillMemo) repeats(m *moments, N, dur *[maxLevels]float64, L int) bool {
	k := 0
	for i := range L {
		if m.P[i] == 0 {
			continue
		}
		if k == len(c.lv) || c.lv[k].i != i || c.lv[k].in != stillInputs(m, N, dur, i) {
			return false
		}
		k++
	}
	return k == len(c.lv)
}
