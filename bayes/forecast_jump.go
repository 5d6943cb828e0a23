package bayes

import "math"

// Long jobs. A registration may imply up to MaxJobEpochs epochs, and the
// forecast's recursion walks every epoch a job has left: at 100,000 epochs
// one forecast took about 0.6 ms, and a tenant's thousand such jobs took a
// 10,000-job round that re-solved the market from 20 to 120 ms
// (BenchmarkShockwaveLive_EpochLimit_10000Jobs2560GPUs, docs/scale.md).
// The recursion therefore runs at most exactEpochs epochs step by step.
// From the epoch c+exactEpochs on (c: the job's current epoch), a job's
// transitions are its weak rows (the families' data that far ahead is not
// read: it comes from completed jobs that ran that long, so only another
// long job has any), every step is then the same linear map of the
// moments, and the full epochs before the last one or two are crossed at
// once by raising that map to their number (jumpEpochs); a still tail of
// more than exactEpochs full epochs is summed in closed form
// (stillEpochs). Every job with at most exactEpochs epochs left is
// forecast exactly as before, bit for bit. The original traces' longest
// jobs have 20,954 epochs (Recommendation jobs of about 15 steps an
// epoch), so their runs do not change; a horizon of 2,048, tried first,
// changed 749 of the 900-job trace's job completion times.
const exactEpochs = 1 << 15

// wholeEpochs is how many epochs from `from` on, before end, a job runs
// whole (w = 1): those that end within its pTotal epochs. The jump crosses
// wholeEpochs(e, E−1, pTotal) of them (the last epoch E−1 has no
// transition after it); a still tail sums wholeEpochs(from, E, pTotal).
func wholeEpochs(from, end int, pTotal float64) int {
	if pTotal < float64(end) {
		end = int(math.Floor(pTotal))
	}
	return max(0, end-from)
}

// jumpEpochs applies k full epochs of forecastRaw's recursion to the
// moments m and the epoch counts N, with every transition the weak rows:
// each epoch adds its duration to the paths' moments (x = d at w = 1) and
// then moves the moments along the rows. In the vector v = (P, A, B, N)
// that epoch is v ← M·v with
//
//	P'_k = Σ_i W_ik P_i
//	A'_k = Σ_i W_ik (A_i + d_i P_i)
//	B'_k = Σ_i W_ik (B_i + 2 d_i A_i + d_i² P_i)
//	N'_k = N_k + P_k
//
// so k epochs are M^k·v, computed by squaring. The first-move
// probabilities fm and the probability q of not having left level 0 yet
// follow the geometric series of level 0's weak row. Mass under the
// recursion's cut-off is dropped at the end instead of after every epoch,
// so the result is the step-by-step recursion's up to rounding and mass
// below 1e-15. It reports false, changing nothing, when a level's epoch
// duration is not finite (the recursion then steps, skipping empty
// levels as it always did).
func jumpEpochs(m *moments, N, fm *[maxLevels]float64, q *float64, st *forecastState, L, k int) bool {
	for i := range L {
		if math.IsInf(st.dur[i], 0) || math.IsNaN(st.dur[i]) {
			return false
		}
	}
	n := 4 * L
	buf := make([]float64, 2*n*n) // M and the squaring's scratch
	mat, tmp := buf[:n*n], buf[n*n:]
	for i := range L {
		d := st.dur[i]
		for c := range L {
			w := st.weak[i][c]
			if w == 0 {
				continue
			}
			mat[c*n+i] += w
			mat[(L+c)*n+L+i] += w
			mat[(L+c)*n+i] += w * d
			mat[(2*L+c)*n+2*L+i] += w
			mat[(2*L+c)*n+L+i] += 2 * d * w
			mat[(2*L+c)*n+i] += d * d * w
		}
		mat[(3*L+i)*n+3*L+i] = 1
		mat[(3*L+i)*n+i] = 1
	}
	var v, nv [4 * maxLevels]float64
	copy(v[:L], m.P[:L])
	copy(v[L:2*L], m.A[:L])
	copy(v[2*L:3*L], m.B[:L])
	copy(v[3*L:4*L], N[:L])
	if *q > 0 && m.P[0] != 0 {
		r := st.weak[0][0]
		rk := math.Pow(r, float64(k))
		s := float64(k) // Σ_{t<k} r^t
		if r != 1 {
			s = (1 - rk) / (1 - r)
		}
		for c := 1; c < L; c++ {
			fm[c] += *q * s * st.weak[0][c]
		}
		*q *= rk
	}
	for p := k; p > 0; {
		if p&1 == 1 {
			mulVec(mat, v[:n], nv[:n], n)
			v, nv = nv, v
		}
		if p >>= 1; p > 0 {
			mulMat(mat, mat, tmp, n)
			mat, tmp = tmp, mat
		}
	}
	copy(m.P[:L], v[:L])
	copy(m.A[:L], v[L:2*L])
	copy(m.B[:L], v[2*L:3*L])
	copy(N[:L], v[3*L:4*L])
	for c := range L {
		if m.P[c] < 1e-15 {
			m.P[c], m.A[c], m.B[c] = 0, 0, 0
		}
	}
	return true
}

// mulVec sets out = a·v for the n×n matrix a (rows first).
func mulVec(a, v, out []float64, n int) {
	for r := range n {
		s := 0.0
		row := a[r*n : r*n+n]
		for c, x := range row {
			if x != 0 {
				s += x * v[c]
			}
		}
		out[r] = s
	}
}

// mulMat sets out = a·b for n×n matrices (rows first), skipping a's zero
// entries: the epoch map is block triangular and its rows sparse.
func mulMat(a, b, out []float64, n int) {
	clear(out[:n*n])
	for r := range n {
		orow := out[r*n : r*n+n]
		for c, x := range a[r*n : r*n+n] {
			if x == 0 {
				continue
			}
			for t, y := range b[c*n : c*n+n] {
				orow[t] += x * y
			}
		}
	}
}
