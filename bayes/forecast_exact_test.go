package bayes

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// textbookRaw is forecastRaw as it was before the recursion skipped the
// epochs beyond the families' data: every step, every transition row
// copied. TestForecast_SkippingBeyondTheFamiliesKeepsEveryBit compares them.
func (f *Forecaster) textbookRaw(j *job) (Forecast, error) { return f.textbookWithin(j, math.MaxInt) }

// textbookWithin is textbookRaw with the weak rows as every transition
// from the epoch horizon on.
func (f *Forecaster) textbookWithin(j *job, horizon int) (Forecast, error) {
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
	var P, A, B, N, fm [maxLevels]float64
	var row [maxLevels]float64
	P[0] = 1
	q := 1.0 // probability of not having left the current regime yet
	for e := c; e < E; e++ {
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
		var Pn, An, Bn [maxLevels]float64
		for i := range L {
			if P[i] == 0 {
				continue
			}
			if e < horizon {
				f.transition(&st, e, i, &row)
			} else {
				row = st.weak[i]
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
		P, A, B = Pn, An, Bn
	}
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

// TestForecast_SkippingBeyondTheFamiliesKeepsEveryBit: the forecast that
// reads weak rows in place beyond the family nodes' data, and skips the
// steps where every level with mass stays put, equals the step-by-step
// recursion bit for bit, over jobs of every mode with families of
// different reach (completed jobs of several lengths), random progress,
// batch-size changes and throughputs.
func TestForecast_SkippingBeyondTheFamiliesKeepsEveryBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	f := NewForecaster(ForecastConfig{})
	modes := []string{"static", "gns", "accordion", ""}
	type live struct {
		id    string
		bs, e int
		steps int64
		total int64
	}
	var jobs []*live
	compared, skipped := 0, 0
	for round := range 400 {
		if round < 300 && rng.IntN(3) == 0 {
			bs0 := []int{16, 32}[rng.IntN(2)]
			E := 3 + rng.IntN(150)
			n := int64(ipe(1000, bs0))
			sp := JobSpec{ID: strconv.Itoa(round), Model: []string{"A", "B", "C", "D", "E", "F"}[rng.IntN(6)], Mode: modes[rng.IntN(len(modes))],
				Workers: 1 + rng.IntN(2), InitialBatchSize: bs0, DatasetSize: 1000, TotalSteps: n * int64(E)}
			if err := f.Admit(sp); err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, &live{id: sp.ID, bs: bs0, total: sp.TotalSteps})
		}
		for k := 0; k < len(jobs); k++ {
			lj := jobs[k]
			if rng.IntN(2) == 0 {
				continue // queued this round
			}
			o := Observation{BatchSize: lj.bs, Elapsed: 120}
			if rng.IntN(8) == 0 { // a batch-size change: the total is recounted at the new size
				nb := lj.bs * 2
				if nb > 128 {
					nb = 16
				}
				frac := float64(lj.steps) / float64(lj.total)
				lj.total = int64(math.Ceil(float64(lj.total) * float64(lj.bs) / float64(nb)))
				lj.steps = int64(frac * float64(lj.total))
				lj.bs = nb
				o.BatchSize = nb
			}
			lj.steps = min(lj.total, lj.steps+int64(1+rng.IntN(int(lj.total/4+1))))
			o.StepsDone, o.TotalSteps = lj.steps, lj.total
			if rng.IntN(5) > 0 {
				o.Throughput = 5 * math.Exp(0.2*rng.NormFloat64()) * float64(32) / float64(lj.bs)
			}
			if err := f.Observe(lj.id, o); err != nil {
				t.Fatal(err)
			}
			if lj.steps >= lj.total {
				f.Complete(lj.id)
				jobs = append(jobs[:k], jobs[k+1:]...)
				k--
			}
		}
		for _, lj := range jobs {
			j := f.jobs[lj.id]
			got, err1 := f.forecastRaw(j)
			want, err2 := f.textbookRaw(j)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if got != want || math.Float64bits(got.Remaining.Mean) != math.Float64bits(want.Remaining.Mean) ||
				math.Float64bits(got.Remaining.P90) != math.Float64bits(want.Remaining.P90) ||
				math.Float64bits(got.NextProb) != math.Float64bits(want.NextProb) {
				t.Fatalf("round %d job %s: %+v, the step-by-step recursion gives %+v", round, lj.id, got, want)
			}
			var st forecastState
			f.prepare(j, &st)
			if beyondFamilies(&st) < j.epochs {
				skipped++
			}
			compared++
		}
		if round%50 == 25 { // a restored forecaster rebuilds the nodes' index of their moves (not saved)
			restored := NewForecaster(ForecastConfig{})
			if err := restored.UnmarshalState(f.MarshalState()); err != nil {
				t.Fatal(err)
			}
			for _, lj := range jobs {
				got, _ := restored.forecastRaw(restored.jobs[lj.id])
				want, _ := f.forecastRaw(f.jobs[lj.id])
				if got != want || math.Float64bits(got.NextProb) != math.Float64bits(want.NextProb) {
					t.Fatalf("round %d job %s restored: %+v, the original %+v", round, lj.id, got, want)
				}
			}
		}
	}
	if compared < 1000 || skipped < compared/10 {
		t.Fatalf("%d forecasts compared, %d reaching past their families' data: too few to test the skip", compared, skipped)
	}
	t.Logf("%d forecasts compared, %d reaching past their families' data", compared, skipped)
}
