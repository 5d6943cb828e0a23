package bayes

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// stepWeak is k epochs of forecastRaw's recursion at w = 1 with every
// transition the weak rows, step by step: what jumpEpochs replaces.
func stepWeak(m *moments, N, fm *[maxLevels]float64, q *float64, st *forecastState, L, k int) {
	for range k {
		for i := range L {
			if m.P[i] == 0 {
				continue
			}
			x := st.dur[i]
			m.B[i] += 2*x*m.A[i] + x*x*m.P[i]
			m.A[i] += x * m.P[i]
			N[i] += m.P[i]
		}
		var nx moments
		for i := range L {
			if m.P[i] == 0 {
				continue
			}
			row := &st.weak[i]
			if i == 0 && *q > 0 {
				for c := 1; c < L; c++ {
					fm[c] += *q * row[c]
				}
				*q *= row[0]
			}
			for c := range L {
				nx.P[c] += m.P[i] * row[c]
				nx.A[c] += m.A[i] * row[c]
				nx.B[c] += m.B[i] * row[c]
			}
		}
		for c := range L {
			if nx.P[c] < 1e-15 {
				nx.P[c], nx.A[c], nx.B[c] = 0, 0, 0
			}
		}
		*m = nx
	}
}

// TestForecast_JumpIsTheStepByStepRecursion: on random weak rows (chains
// that climb, cycle or stay, with zeros), durations, moments, first-move
// sums and run lengths, jumpEpochs gives the epoch-by-epoch recursion's
// moments, counts, first-move probabilities and q up to rounding, and
// declines, changing nothing, when a level's duration is infinite.
func TestForecast_JumpIsTheStepByStepRecursion(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 1))
	close := func(got, want, scale float64) bool { return math.Abs(got-want) <= 1e-9*scale+1e-300 }
	for trial := range 3000 {
		L := 1 + rng.IntN(maxLevels)
		var st forecastState
		for i := range L {
			st.dur[i] = math.Exp(6 * rng.Float64())
			switch rng.IntN(3) {
			case 0: // stays
				st.weak[i][i] = 1
			case 1: // moves to one level (perhaps itself)
				h := 0.5 * rng.Float64()
				st.weak[i][i] += 1 - h
				st.weak[i][rng.IntN(L)] += h
			default: // a dense row
				s := 0.0
				for c := range L {
					if rng.IntN(3) > 0 {
						st.weak[i][c] = rng.Float64()
						s += st.weak[i][c]
					}
				}
				if s == 0 {
					st.weak[i][i], s = 1, 1
				}
				for c := range L {
					st.weak[i][c] /= s
				}
			}
		}
		var m moments
		var N, fm [maxLevels]float64
		m.P[0] = 0.5 + 0.5*rng.Float64()
		for i := 1; i < L; i++ {
			if rng.IntN(2) == 0 {
				m.P[i] = rng.Float64() * (1 - m.P[0]) / float64(L)
			}
		}
		for i := range L {
			if m.P[i] > 0 {
				m.A[i] = 1e3 * rng.Float64() * m.P[i]
				m.B[i] = m.A[i] * m.A[i] / m.P[i] * (1 + rng.Float64())
				N[i] = 10 * rng.Float64()
			}
			if i > 0 && rng.IntN(2) == 0 {
				fm[i] = 0.1 * rng.Float64()
			}
		}
		q := rng.Float64()
		k := 1 + rng.IntN(3000)
		gm, gN, gfm, gq := m, N, fm, q
		wm, wN, wfm, wq := m, N, fm, q
		if !jumpEpochs(&gm, &gN, &gfm, &gq, &st, L, k) {
			t.Fatalf("trial %d: declined with finite durations", trial)
		}
		stepWeak(&wm, &wN, &wfm, &wq, &st, L, k)
		var sA, sB, sN float64
		for i := range L {
			sA, sB, sN = sA+math.Abs(wm.A[i]), sB+math.Abs(wm.B[i]), sN+math.Abs(wN[i])
		}
		for i := range maxLevels {
			for _, c := range []struct {
				what             string
				got, want, scale float64
			}{{"P", gm.P[i], wm.P[i], 1}, {"A", gm.A[i], wm.A[i], sA}, {"B", gm.B[i], wm.B[i], sB},
				{"N", gN[i], wN[i], sN}, {"fm", gfm[i], wfm[i], 1}} {
				if !close(c.got, c.want, c.scale) {
					t.Fatalf("trial %d (L=%d, %d epochs): %s[%d] %v, step by step %v", trial, L, k, c.what, i, c.got, c.want)
				}
			}
		}
		if !close(gq, wq, 1) {
			t.Fatalf("trial %d: q %v, step by step %v", trial, gq, wq)
		}
		// An infinite duration: declined, nothing changed.
		st.dur[rng.IntN(L)] = math.Inf(1)
		before, bN, bfm, bq := m, N, fm, q
		if jumpEpochs(&m, &N, &fm, &q, &st, L, k) || m != before || N != bN || fm != bfm || q != bq {
			t.Fatalf("trial %d: a jump over an infinite duration was made", trial)
		}
	}
}

// TestForecast_LongJobsAgreeWithTheTextbook: jobs of every mode with up to
// MaxJobEpochs epochs (and no family data: each its own model), at random
// progress with batch-size changes and throughputs, get the step-by-step
// recursion's forecast up to rounding: the same epochs, batch sizes and
// most likely next batch size, the remaining time's mean and quantiles
// within 1e-9 and the probability of the next change within 1e-9. Jobs
// with at most exactEpochs epochs left keep its bits.
func TestForecast_LongJobsAgreeWithTheTextbook(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 2))
	f := NewForecaster(ForecastConfig{})
	modes := []string{"static", "gns", "accordion", ""}
	jumped, exact := 0, 0
	for n := range 160 {
		bs := []int{16, 32}[rng.IntN(2)]
		E := []int{1000, exactEpochs + 5000, 3 * exactEpochs, MaxJobEpochs}[rng.IntN(4)]
		spi := int64(ipe(320, bs))
		sp := JobSpec{ID: strconv.Itoa(n), Model: "m" + strconv.Itoa(n), Mode: modes[n%len(modes)],
			Workers: 1, InitialBatchSize: bs, DatasetSize: 320, TotalSteps: spi * int64(E)}
		if err := f.Admit(sp); err != nil {
			t.Fatal(err)
		}
		total, steps := sp.TotalSteps, int64(0)
		for range 1 + rng.IntN(6) {
			o := Observation{BatchSize: bs, Elapsed: 60}
			if rng.IntN(3) == 0 && sp.Mode != "static" {
				nb := bs * 2
				frac := float64(steps) / float64(total)
				total = int64(math.Ceil(float64(total) * float64(bs) / float64(nb)))
				steps = int64(frac * float64(total))
				bs, o.BatchSize = nb, nb
			}
			steps = min(total-1, steps+int64(rng.IntN(int(total/8+1))))
			o.StepsDone, o.TotalSteps = steps, total
			o.Throughput = 50 * math.Exp(0.2*rng.NormFloat64()) * 32 / float64(bs)
			if err := f.Observe(sp.ID, o); err != nil {
				t.Fatal(err)
			}
		}
		j := f.jobs[sp.ID]
		got, err1 := f.forecastRaw(j)
		want, err2 := f.textbookRaw(j)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if j.epochs-int(j.pos) > exactEpochs+2 {
			jumped++
			rel := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
			g, w := got, want
			if !rel(g.Remaining.Mean, w.Remaining.Mean) || !rel(g.Remaining.P10, w.Remaining.P10) ||
				!rel(g.Remaining.P90, w.Remaining.P90) || math.Abs(g.NextProb-w.NextProb) > 1e-9 {
				t.Fatalf("job %s (%s, %d epochs at %.1f): %+v, step by step %+v", sp.ID, sp.Mode, j.epochs, j.pos, g, w)
			}
			g.Remaining, w.Remaining, g.NextProb, w.NextProb = Dist{}, Dist{}, 0, 0
			if g != w {
				t.Fatalf("job %s: %+v, step by step %+v", sp.ID, g, w)
			}
			continue
		}
		exact++
		if got != want || math.Float64bits(got.NextProb) != math.Float64bits(want.NextProb) {
			t.Fatalf("job %s (%d epochs at %.1f): %+v, step by step %+v", sp.ID, j.epochs, j.pos, got, want)
		}
	}
	if jumped < 80 || exact < 20 {
		t.Fatalf("only %d forecasts crossed epochs at once (%d exact)", jumped, exact)
	}
	t.Logf("%d forecasts crossed epochs at once, %d stepped every epoch", jumped, exact)
}

// TestForecast_ALongJobReadsItsFamiliesWithinItsHorizon: a long job whose
// model's completed jobs ran longer than its horizon (its epoch plus
// exactEpochs) reads their transitions up to the horizon and its weak rows
// beyond: the step-by-step recursion that does the same agrees, and the
// one that reads the families to their end does not, so the horizon is
// where the forecast says.
func TestForecast_ALongJobReadsItsFamiliesWithinItsHorizon(t *testing.T) {
	f := NewForecaster(ForecastConfig{})
	const E = 3 * exactEpochs
	spi := int64(ipe(320, 32))
	for k := range 4 { // completed gns jobs that doubled at epochs 500 and 2,600+k
		sp := JobSpec{ID: "done" + strconv.Itoa(k), Model: "shared", Mode: "gns", Workers: 1,
			InitialBatchSize: 32, DatasetSize: 320, TotalSteps: spi * E}
		if err := f.Admit(sp); err != nil {
			t.Fatal(err)
		}
		total := sp.TotalSteps
		bs := 32
		for _, at := range []int{500, exactEpochs + 550 + k} {
			steps := int64(at) * int64(ipe(320, bs))
			if err := f.Observe(sp.ID, Observation{BatchSize: bs, StepsDone: steps, TotalSteps: total, Elapsed: 60, Throughput: 40}); err != nil {
				t.Fatal(err)
			}
			frac := float64(steps) / float64(total)
			total = int64(math.Ceil(float64(total) * float64(bs) / float64(2*bs)))
			bs *= 2
			if err := f.Observe(sp.ID, Observation{BatchSize: bs, StepsDone: int64(frac * float64(total)), TotalSteps: total, Elapsed: 1, Throughput: 40}); err != nil {
				t.Fatal(err)
			}
		}
		f.Complete(sp.ID)
	}
	sp := JobSpec{ID: "long", Model: "shared", Mode: "gns", Workers: 1, InitialBatchSize: 32, DatasetSize: 320, TotalSteps: spi * E}
	if err := f.Admit(sp); err != nil {
		t.Fatal(err)
	}
	if err := f.Observe("long", Observation{BatchSize: 32, StepsDone: 100 * spi, TotalSteps: sp.TotalSteps, Elapsed: 60, Throughput: 40}); err != nil {
		t.Fatal(err)
	}
	j := f.jobs["long"]
	var st forecastState
	f.prepare(j, &st)
	c := int(j.pos)
	if beyondFamilies(&st) <= c+exactEpochs {
		t.Fatalf("the families' data ends at epoch %d, within the horizon %d", beyondFamilies(&st), c+exactEpochs)
	}
	got, _ := f.forecastRaw(j)
	within, _ := f.textbookWithin(j, c+exactEpochs)
	all, _ := f.textbookRaw(j)
	rel := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	if !rel(got.Remaining.Mean, within.Remaining.Mean) || !rel(got.Remaining.P90, within.Remaining.P90) ||
		math.Abs(got.NextProb-within.NextProb) > 1e-9 || got.NextBatchSize != within.NextBatchSize {
		t.Fatalf("%+v, the recursion reading the families to the horizon %+v", got, within)
	}
	if rel(got.Remaining.Mean, all.Remaining.Mean) {
		t.Fatalf("the families beyond the horizon change nothing (%+v against %+v): the test shows no horizon", got, all)
	}
	t.Logf("mean %.6g s (families to their end: %.6g s)", got.Remaining.Mean, all.Remaining.Mean)
}
