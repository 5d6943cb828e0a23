package bayes

// stillEpochs finishes forecastRaw's recursion over the epochs from..E−1
// once no transition can move probability any more (staysPut holds from
// epoch from−1 on: the epoch steps are skipped, and every epoch only
// accumulates its time). It does what the loop does for those epochs, the
// same operations on the same values in the same order per level, with the
// level's moments in registers and the products that do not change from
// epoch to epoch computed once: x = w·d is d where the whole epoch remains
// (w = 1), so (2·x)·A + (x·x)·P and x·P take the same values each epoch.
// Levels do not interact while nothing moves, so they are finished one
// after the other. The bits are the loop's (TestForecast_StillEpochs…).
func stillEpochs(m *moments, N, dur *[maxLevels]float64, L, from, E int, pTotal float64) {
	for i := range L {
		p := m.P[i]
		if p == 0 {
			continue
		}
		a, b, n, d := m.A[i], m.B[i], N[i], dur[i]
		c2, t2, dp := 2*d, d*d*p, d*p
		e := from
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
