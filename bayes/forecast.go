package bayes

import (
	"fmt"
	"math"
)

// z90 is the 90 % quantile of the standard normal distribution.
const z90 = 1.2815515655446004

// Dist summarises a positive random quantity: its mean and its 10 % and
// 90 % quantiles.
type Dist struct {
	Mean, P10, P90 float64
}

// FinishUnderShare maps a remaining isolated run time x to the finish time
// now + x/share of a job that receives a fraction share of its gang's
// time (spec §4.4 uses share = min(1, G/N)). The map is increasing, so the
// quantiles map through. A share that is not positive and finite gives
// +Inf everywhere (the job never finishes).
func (d Dist) FinishUnderShare(now, share float64) Dist {
	if !(share > 0) || math.IsInf(share, 0) {
		inf := math.Inf(1)
		return Dist{inf, inf, inf}
	}
	return Dist{now + d.Mean/share, now + d.P10/share, now + d.P90/share}
}

// lognormalDist matches a log-normal distribution to a mean and a variance
// and returns its mean and 10 %/90 % quantiles.
func lognormalDist(mean, variance float64) Dist {
	if !(mean > 0) {
		return Dist{}
	}
	if !(variance > 0) {
		return Dist{mean, mean, mean}
	}
	s2 := math.Log1p(variance / (mean * mean))
	s := math.Sqrt(s2)
	mu := math.Log(mean) - s2/2
	return Dist{mean, math.Exp(mu - z90*s), math.Exp(mu + z90*s)}
}

// Forecast is a job's remaining-runtime forecast.
type Forecast struct {
	// Remaining is the isolated execution time still needed on the job's
	// gang, in seconds.
	Remaining Dist
	// EpochSeconds is the current estimate of one full epoch at the
	// current batch size, ceil(S/bs)/θ̂ (the "d" of the market); > 0.
	EpochSeconds float64
	Epochs       int // E
	Epoch        int // completed epochs c
	BatchSize    int // current regime
	RegimeEpochs int // completed epochs since the current regime began
	// ChangeProb is the detector's probability of an unannounced
	// throughput change within its window (Detector.ChangeProb).
	ChangeProb float64
	// NextBatchSize is the most likely batch size of the job's next
	// regime change, and NextProb the probability that this change happens
	// before the job ends. Without any likely change, NextBatchSize is the
	// current batch size and NextProb 0.
	NextBatchSize int
	NextProb      float64
	// Family is the finest prior level with completed jobs behind this
	// forecast: "recipe", "model+mode", "model" or "weak".
	Family string
	// Uninformed is set when no throughput was known for the job: no
	// measurement, no declared throughput and no peer at any of its batch
	// sizes. The forecast then assumes UninformedSamplesPerGPU and is wide.
	Uninformed bool
}

// levelSet is the batch-size levels of one forecast; index 0 is the
// current batch size.
type levelSet struct {
	bs [maxLevels]int
	n  int
}

func (s *levelSet) add(bs int) int {
	for i := range s.n {
		if s.bs[i] == bs {
			return i
		}
	}
	if s.n == maxLevels || bs < 1 {
		return -1
	}
	s.bs[s.n] = bs
	s.n++
	return s.n - 1
}

func (s *levelSet) find(bs int) int {
	for i := range s.n {
		if s.bs[i] == bs {
			return i
		}
	}
	return -1
}

// forecastState is the scratch of one forecast, kept on the stack.
type forecastState struct {
	lv    levelSet
	nodes [3]*node
	beta  [3]float64
	jmap  [3][maxLevels]int8     // job level → node level (−1 absent)
	nmap  [3][maxNodeLevels]int8 // node level → job level (−1 absent)
	weak  [maxLevels][maxLevels]float64
	stay  [maxLevels]bool // weak row is the identity
	mu, v [maxLevels]float64
	dur   [maxLevels]float64 // seconds of one full epoch per level
}

// Forecast returns the job's remaining-runtime forecast. It fails only for
// an unknown job.
//
// The regime model (doc.go) is a non-homogeneous Markov chain over
// batch-size levels indexed by the absolute epoch, whose transition at
// epoch e from level i is the hierarchical Dirichlet posterior mean over
// the job's families (recipe → model+mode → model → the job's weak prior).
// The remaining time R = Σ_e w_e·d(b_e) (w_e: the fraction of epoch e still
// to run; d: seconds of an epoch at a level) has its mean and second moment
// computed by a forward recursion over the epochs; throughput uncertainty
// per level adds Σ_ℓ (N_ℓ d_ℓ)²(e^{v_ℓ}−1) to the variance, and P10/P90
// come from the log-normal with the same mean and variance, their
// log-space distance from the mean scaled by the factor calibrated on
// completed jobs (calibrate.go).
func (f *Forecaster) Forecast(id string) (Forecast, error) {
	j, ok := f.jobs[id]
	if !ok {
		return Forecast{}, fmt.Errorf("bayes: unknown job %s", id)
	}
	fc, err := f.forecastShared(j) // forecastRaw, shared by pristine jobs (forecast_memo.go)
	fc.Remaining = f.cal.calibrate(fc.Remaining)
	return fc, err
}

// forecastRaw is Forecast before the band's calibration (calibrate.go).
func (f *Forecaster) forecastRaw(j *job) (Forecast, error) {
	var st forecastState
	f.prepare(j, &st)
	uninformed := f.throughputs(j, &st)

	n := float64(ipe(j.spec.DatasetSize, j.bs))
	pTotal := float64(j.total) / n
	E := j.epochs
	c := min(int(j.pos), E-1)
	fc := Forecast{
		EpochSeconds: st.dur[0], Epochs: E, Epoch: min(int(j.pos), E), BatchSize: j.bs,
		RegimeEpochs:  max(0, int(j.pos)-int(j.segs[len(j.segs)-1].start)),
		ChangeProb:    j.det.ChangeProb(),
		NextBatchSize: j.bs, Family: "weak", Uninformed: uninformed,
	}
	for lvl := levelRecipe; lvl >= levelModel; lvl-- {
		if st.nodes[lvl] != nil {
			fc.Family = familyNames[lvl]
			break
		}
	}
	if j.steps >= j.total || j.pos >= pTotal {
		return fc, nil
	}

	L := st.lv.n
	// cur holds this epoch's level probabilities P and first and second
	// moments A, B; nxt receives the next epoch's. The two buffers swap
	// by pointer instead of the next epoch being copied back.
	var buf [2]moments
	cur, nxt := &buf[0], &buf[1]
	var N, fm [maxLevels]float64
	var row [maxLevels]float64
	cur.P[0] = 1
	q := 1.0                   // probability of not having left the current regime yet
	horizon := c + exactEpochs // from here on, weak rows and a jump (forecast_jump.go)
	tail := min(beyondFamilies(&st), horizon)
	steps := uint64(0)
	for e := c; e < E; e++ {
		steps++
		if e == horizon {
			if k := wholeEpochs(e, E-1, pTotal); k > 0 && jumpEpochs(cur, &N, &fm, &q, &st, L, k) {
				e += k
			}
		}
		P, A, B := &cur.P, &cur.A, &cur.B
		w := 1.0
		if e == c {
			w = min(float64(c+1), pTotal) - j.pos
		} else if float64(e+1) > pTotal {
			w = pTotal - float64(e)
		}
		if w < 0 {
			w = 0
		}
		for i := range L {
			if P[i] == 0 {
				continue
			}
			x := w * st.dur[i]
			B[i] += 2*x*A[i] + x*x*P[i]
			A[i] += x * P[i]
			N[i] += w * P[i]
		}
		if e == E-1 {
			break
		}
		if e >= tail && staysPut(&st, P) {
			stillEpochsMemo(&j.still, cur, &N, &st.dur, L, e+1, E, pTotal) // the remaining epochs only accumulate
			break
		}
		*nxt = moments{}
		Pn, An, Bn := &nxt.P, &nxt.A, &nxt.B
		for i := range L {
			if P[i] == 0 {
				continue
			}
			row := &row
			if e >= tail {
				row = &st.weak[i] // what transition would copy
			} else {
				f.transition(&st, e, i, row)
			}
			if i == 0 && q > 0 {
				for k := 1; k < L; k++ {
					fm[k] += q * row[k]
				}
				q *= row[0]
			}
			p, a, b := P[i], A[i], B[i]
			for k := range L {
				r := row[k]
				if r == 0 {
					continue
				}
				Pn[k] += p * r
				An[k] += a * r
				Bn[k] += b * r
			}
		}
		for k := range L { // drop negligible mass so that dead rows are skipped
			if Pn[k] < 1e-15 {
				Pn[k], An[k], Bn[k] = 0, 0, 0
			}
		}
		cur, nxt = nxt, cur
	}
	f.steps += steps
	A, B := &cur.A, &cur.B
	mean, m2, vthr := 0.0, 0.0, 0.0
	for i := range L {
		mean += A[i]
		m2 += B[i]
		x := N[i] * st.dur[i]
		vthr += x * x * math.Expm1(st.v[i])
	}
	fc.Remaining = lognormalDist(mean, max(0, m2-mean*mean)+vthr)
	best := 0
	for k := 1; k < L; k++ {
		if fm[k] > fm[best] {
			best = k
		}
	}
	if best > 0 && fm[best] > 1e-9 {
		fc.NextBatchSize, fc.NextProb = st.lv.bs[best], fm[best]
	}
	return fc, nil
}

// moments is one epoch's state of the forecast's recursion: per level,
// the probability of being there and the first and second moments of
// the time accumulated on the paths that are.
type moments struct{ P, A, B [maxLevels]float64 }

// beyondFamilies is the first epoch from which none of the forecast's
// family nodes has data: from there on, every transition row is the job's
// weak row.
func beyondFamilies(st *forecastState) int {
	tail := 0
	for _, nd := range st.nodes {
		if nd != nil {
			tail = max(tail, len(nd.occ))
		}
	}
	return tail
}

// staysPut reports whether every level holding mass in P keeps it through
// the weak rows (identity rows, as a static job's). A step of the
// recursion then changes nothing, bit for bit: each next-epoch sum
// receives one term, p·1 = p (and a, b likewise), the mass cut-off finds
// no new small mass, and fm and q gain q·0 and a factor of 1. Skipping
// the step keeps the forecast exact.
func staysPut(st *forecastState, P *[maxLevels]float64) bool {
	for i := range st.lv.n {
		if P[i] != 0 && !st.stay[i] {
			return false
		}
	}
	return true
}

// prepare builds the level set, the family node maps and the weak prior.
func (f *Forecaster) prepare(j *job, st *forecastState) {
	lv := &st.lv
	lv.add(j.bs)
	lv.add(j.spec.InitialBatchSize)
	// Levels above the largest batch size the model's jobs ever used are
	// not considered once enough of them were seen (batchCap).
	limit := f.batchCap(j.spec.Model)
	within := func(bs int) bool { return limit == 0 || bs <= limit }
	for _, s := range j.segs {
		if lv.n == maxLevels {
			break
		}
		lv.add(int(s.bs))
	}
	betas := [3]float64{f.cfg.ModelStrength, f.cfg.ModeStrength, f.cfg.RecipeStrength}
	for lvl := levelRecipe; lvl >= levelModel; lvl-- {
		nd := j.nodes[lvl]
		self := 0 // the job's own past epochs teach its node too, but not its future
		if j.taught > 0 {
			self = 1
		}
		if nd == nil || nd.jobs-self == 0 {
			continue
		}
		st.nodes[lvl], st.beta[lvl] = nd, betas[lvl]
		for i := range nd.nlev {
			if bs := levelBS(nd.keys, nd.levels[i], j.spec.InitialBatchSize); within(bs) {
				lv.add(bs)
			}
		}
	}
	dynamic := j.spec.Mode != "static"
	if dynamic && j.spec.Mode != "accordion" {
		for _, bs := range []int{2 * j.bs, 4 * j.bs} {
			if within(bs) {
				lv.add(bs)
			}
		}
	}
	bs0 := j.spec.InitialBatchSize
	top := 0 // accordion's large batch size: the largest level above bs0
	for i := range lv.n {
		if lv.bs[i] > bs0 && lv.bs[i] > top {
			top = lv.bs[i]
		}
	}
	if j.spec.Mode == "accordion" && top == 0 && within(2*bs0) {
		top = 2 * bs0
		lv.add(top)
	}
	for lvl := range st.nodes {
		for i := range st.jmap[lvl] {
			st.jmap[lvl][i] = -1
		}
		for i := range st.nmap[lvl] {
			st.nmap[lvl][i] = -1
		}
		nd := st.nodes[lvl]
		if nd == nil {
			continue
		}
		for k := range nd.nlev {
			if i := lv.find(levelBS(nd.keys, nd.levels[k], j.spec.InitialBatchSize)); i >= 0 {
				st.nmap[lvl][k], st.jmap[lvl][i] = int8(i), int8(k)
			}
		}
	}
	// Weak prior: a Beta posterior of the per-epoch change hazard from the
	// job's own history, toward doubling (gns, unknown) or between bs0 and
	// the large batch size (accordion).
	h0 := f.cfg.WeakHazard
	if !dynamic {
		h0 = 0
	}
	h := (h0*f.cfg.WeakStrength + float64(j.changes)) / (f.cfg.WeakStrength + j.pos)
	h = min(h, 0.5)
	for i := range lv.n {
		st.weak[i][i] = 1
		st.stay[i] = true
		if h == 0 {
			continue
		}
		b := lv.bs[i]
		t := -1
		switch {
		case j.spec.Mode == "accordion" && b == bs0:
			t = lv.find(top)
		case j.spec.Mode == "accordion":
			t = lv.find(bs0)
		default:
			t = lv.find(2 * b)
		}
		if t >= 0 && t != i {
			st.weak[i][i] = 1 - h
			st.weak[i][t] = h
			st.stay[i] = false
		}
	}
}

// transition fills row with P(level at e+1 | level i at e): the job's weak
// row, smoothed successively by the model, model+mode and recipe nodes.
func (f *Forecaster) transition(st *forecastState, e, i int, row *[maxLevels]float64) {
	L := st.lv.n
	*row = st.weak[i]
	for lvl := range st.nodes {
		nd := st.nodes[lvl]
		if nd == nil || e >= len(nd.occ) {
			continue
		}
		ni := st.jmap[lvl][i]
		if ni < 0 {
			continue
		}
		o := float64(nd.occ[e][ni])
		if o == 0 {
			continue
		}
		beta := st.beta[lvl]
		inv := 1 / (o + beta)
		sc := beta * inv
		for k := range L {
			row[k] *= sc
		}
		stay := o
		for _, m := range nd.moves[e] {
			if m.from != ni {
				continue
			}
			cnt := float64(m.n)
			stay -= cnt
			if k := st.nmap[lvl][m.to]; k >= 0 {
				row[k] += cnt * inv
			} else {
				row[i] += cnt * inv
			}
		}
		row[i] += stay * inv
	}
}

// throughputs fills the per-level log-throughput mean and variance and the
// epoch durations. A level is anchored by the job's own measurement, the
// peers' table (shifted by the job's own offset from its peers), or the
// declared throughput at bs0; any other level is extrapolated from the
// nearest anchored one with the model's ratio posterior. It reports whether
// nothing anchored any level.
func (f *Forecaster) throughputs(j *job, st *forecastState) (uninformed bool) {
	L := st.lv.n
	var anchored [maxLevels]bool
	model, w := j.spec.Model, j.spec.Workers
	// the job's own offset from its peers, over its measured levels
	off, noff := 0.0, 0
	ownMean := func(i int) (float64, float64, bool) {
		b := st.lv.bs[i]
		if i == 0 && j.det.Observations() > 0 {
			mu, v := j.det.meanAndVariance()
			return mu, v, true
		}
		if o := j.ownAt(b); o != nil {
			return o.logThr, o.v, true
		}
		return 0, 0, false
	}
	for i := range L {
		mu, v, ok := ownMean(i)
		if !ok {
			continue
		}
		st.mu[i], st.v[i], anchored[i] = mu, v+1e-6, true
		if pm, _, ok := f.peerThroughput(model, st.lv.bs[i], w); ok {
			off += mu - pm
			noff++
		}
	}
	if noff > 0 {
		off /= float64(noff)
	}
	for i := range L {
		if anchored[i] {
			continue
		}
		if pm, pv, ok := f.peerThroughput(model, st.lv.bs[i], w); ok {
			st.mu[i], st.v[i], anchored[i] = pm+off, pv, true
		} else if st.lv.bs[i] == j.spec.InitialBatchSize && j.spec.Throughput > 0 {
			st.mu[i], st.v[i], anchored[i] = math.Log(j.spec.Throughput), 0.01, true
		}
	}
	any := false
	for i := range L {
		any = any || anchored[i]
	}
	if !any {
		i := st.lv.find(j.spec.InitialBatchSize)
		st.mu[i] = math.Log(f.cfg.UninformedSamplesPerGPU * float64(w) / float64(st.lv.bs[i]))
		st.v[i], anchored[i] = 1, true
		uninformed = true
	}
	ratio := f.ratioPrior(model)
	rv := ratio.PredictiveVariance()
	if math.IsInf(rv, 0) {
		rv = 1
	}
	for i := range L {
		if !anchored[i] {
			b := float64(st.lv.bs[i])
			best, bd := -1, math.Inf(1)
			for k := range L {
				if anchored[k] {
					if d := math.Abs(math.Log2(b / float64(st.lv.bs[k]))); d < bd {
						best, bd = k, d
					}
				}
			}
			bk := float64(st.lv.bs[best])
			dl := math.Log2(b / bk)
			st.mu[i] = st.mu[best] + math.Log(bk/b) + ratio.Mu*dl
			st.v[i] = st.v[best] + rv*dl*dl
		}
		st.dur[i] = float64(ipe(j.spec.DatasetSize, st.lv.bs[i])) * math.Exp(-st.mu[i]+st.v[i]/2)
	}
	return uninformed
}
