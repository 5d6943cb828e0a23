package pollux

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// Fitted on noise-free step times of a known model, the agent's fit
// predicts those step times closely (spec §4.2).
func TestFitPerfParams_RecoversStepTimesOfAKnownModel(t *testing.T) {
	truth := PerfParams{0.02, 0.003, 0.05, 0.004, 0.01, 0.001, 1.5}
	var prof []ProfileEntry
	for _, c := range [][3]int{{1, 1, 32}, {1, 1, 64}, {1, 2, 64}, {1, 4, 128}, {2, 8, 64}, {4, 16, 32}, {3, 6, 128}} {
		n, r, a := c[0], c[1], c[2]
		acc := truth.tAcc(float64(a))
		step := truth.StepTime(n, r, float64(a), 0)
		prof = append(prof, ProfileEntry{N: n, R: r, A: a, Step: step, Sync: step - acc})
	}
	p := FitPerfParams(prof)
	for _, e := range prof {
		got, want := p.StepTime(e.N, e.R, float64(e.A), 0), e.Step
		if math.Abs(got/want-1) > 0.03 {
			t.Errorf("(%d, %d, %d): fitted step %.5f, true %.5f", e.N, e.R, e.A, got, want)
		}
	}
	if p[pGamma] < 1 || p[pGamma] > 10 {
		t.Errorf("γ = %v outside [1, 10]", p[pGamma])
	}
}

// With one observation the unidentifiable parameters stay at their
// initial values, α_c is half the accumulation time, and the prior puts
// inter-node sync at least 1.1× intra-node sync (spec §4.2).
func TestFitPerfParams_FixesWhatOneObservationCannotIdentify(t *testing.T) {
	p := FitPerfParams([]ProfileEntry{{N: 1, R: 1, A: 32, Step: 0.2, Sync: 0.0004}})
	if math.Abs(p[pAlphaC]-(0.2-0.0004)/2) > 1e-12 {
		t.Errorf("α_c = %v, want half the accumulation time %v", p[pAlphaC], (0.2-0.0004)/2)
	}
	for _, i := range []int{pAlphaN, pBetaN, pAlphaR, pBetaR} {
		if p[i] > 1.2e-8 {
			t.Errorf("parameter %d = %v, want it held at 1e-8 (×1.1 for the prior)", i, p[i])
		}
	}
}

// Goodput optimisation returns the best of its 50 candidates and respects
// the per-GPU batch-size range (spec §4.3).
func TestGoodputOptimize_BestCandidateWithinLocalRange(t *testing.T) {
	app := mustApps(t)["cifar10"]
	g := Goodput{Perf: PerfParams{0.01, 0.0004, 0.05, 0.002, 0.01, 0.001, 1.2}, Grad: GradParams{Sqr: 1, Var: 20},
		InitBsz: app.InitBsz, MaxBsz: app.MaxBsz, MinLocal: app.MinLocal, MaxLocal: app.MaxLocal}
	for _, c := range [][2]int{{1, 1}, {1, 4}, {2, 8}, {8, 32}} {
		best, a, s := g.Optimize(c[0], c[1])
		if a < app.MinLocal || a > app.MaxLocal || s < 0 {
			t.Fatalf("(%d, %d): a = %d, s = %d outside the range", c[0], c[1], a, s)
		}
		if v := g.Eval(c[0], c[1], a, s); math.Abs(v-best) > 1e-9*best {
			t.Fatalf("(%d, %d): returned goodput %v, evaluation %v", c[0], c[1], best, v)
		}
		if c[1] == 1 && a*(s+1) > app.InitBsz && s < 1 {
			t.Fatalf("one GPU above the initial batch size must accumulate (a %d, s %d)", a, s)
		}
		for _, b := range []int{app.InitBsz, 512, app.MaxBsz} {
			if b < app.MinLocal*c[1] {
				continue
			}
			aa, ss := fixedBatch(app, b, c[1])
			if aa <= app.MaxLocal && g.Eval(c[0], c[1], aa, ss) > best*1.05 {
				t.Fatalf("(%d, %d): batch %d beats the optimum by more than the grid spacing", c[0], c[1], b)
			}
		}
	}
	if e := g.Efficiency(float64(app.InitBsz)); math.Abs(e-1) > 1e-12 {
		t.Fatalf("efficiency at the initial batch size = %v, want 1", e)
	}
}

// A job makes no progress during the 30 s after an allocation, completes
// with 1 s resolution at its last epoch, and counts GPU-seconds throughout
// (spec §3.3, §3.4).
func TestJob_RestartDelayThenProgressToCompletion(t *testing.T) {
	app := mustApps(t)["cifar10"]
	j := NewJob(WorkloadRow{Name: "cifar10-0", Application: "cifar10", Replicas: 2, BatchSize: 256}, app)
	SetupTiresias(j)
	j.Reallocate([]int{0, 0})
	if j.Restarts != 0 || j.Atomic != 128 || j.Accum != 0 {
		t.Fatalf("after the first allocation: restarts %d, a %d, s %d; want 0, 128, 0", j.Restarts, j.Atomic, j.Accum)
	}
	if err := j.Step(0, 30, 0); err != nil || j.Progress != 0 || j.Attained != 60 {
		t.Fatalf("during the delay: progress %v attained %v (%v)", j.Progress, j.Attained, err)
	}
	now := 30
	for !j.Done() && now < 1e6 {
		if err := j.Step(now, 60, 0); err != nil {
			t.Fatal(err)
		}
		now += 60
	}
	if !j.Done() || j.Epoch != app.MaxEpochs || j.Progress != app.ProgressToFinish() {
		t.Fatalf("done %v epoch %d progress %v", j.Done(), j.Epoch, j.Progress)
	}
	if j.Completion > now || j.Completion <= now-60 {
		t.Fatalf("completion %d outside the last interval (%d, %d]", j.Completion, now-60, now)
	}
	if want := float64(2 * j.Completion); math.Abs(j.Attained-want) > 1e-9 {
		t.Fatalf("attained %v GPU-s, want %v", j.Attained, want)
	}
	j.Reallocate(nil)
	if j.Restarts != 0 {
		t.Fatal("releasing GPUs must not count as a restart")
	}
}

func TestParseWorkload_RejectsBadRowsNamingLineAndField(t *testing.T) {
	apps := mustApps(t)
	good := Header + "\ncifar10-0,0,cifar10,1,128\nncf-1,10,ncf,1,256\n"
	rows, err := ParseWorkload(strings.NewReader(good), apps)
	if err != nil || len(rows) != 2 || rows[1] != (WorkloadRow{"ncf-1", 10, "ncf", 1, 256}) {
		t.Fatalf("good workload: %v, %v", rows, err)
	}
	if !IsWorkload([]byte(good)) || IsWorkload([]byte("0\tResNet-18\n")) {
		t.Fatal("header detection")
	}
	for _, c := range []struct{ body, want string }{
		{"name,time\n", "header"},
		{Header + "\n", "no jobs"},
		{Header + "\na,0,gpt,1,128\n", "line 2: field 3"},
		{Header + "\na,0,cifar10,0,128\n", "line 2: field 4"},
		{Header + "\na,0,cifar10,65,4096\n", "line 2: field 4"},
		{Header + "\na,0,cifar10,1,64\n", "line 2: field 5"},
		{Header + "\na,0,cifar10,64,128\n", "line 2: field 5"},
		{Header + "\na,-1,cifar10,1,128\n", "line 2: field 2"},
		{Header + "\na,5,cifar10,1,128\nb,4,cifar10,1,128\n", "line 3: field 2"},
		{Header + "\na,0,cifar10,1,128\na,4,cifar10,1,128\n", "line 3: field 1"},
		{Header + "\na,0,cifar10,1\n", "wrong number of fields"},
	} {
		_, err := ParseWorkload(strings.NewReader(c.body), apps)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one mentioning %q", c.body, err, c.want)
		}
	}
}

// A small synthetic workload for the fast policy tests: the first n rows
// of a mix of every application.
func smallWorkload(n int) []WorkloadRow {
	base := []WorkloadRow{
		{"cifar10-0", 0, "cifar10", 2, 256}, {"ncf-1", 0, "ncf", 1, 256}, {"bert-2", 30, "bert", 1, 12},
		{"deepspeech2-3", 60, "deepspeech2", 4, 80}, {"cifar10-4", 90, "cifar10", 1, 128}, {"ncf-5", 200, "ncf", 1, 512},
		{"yolov3-6", 300, "yolov3", 8, 64}, {"cifar10-7", 400, "cifar10", 4, 512}, {"bert-8", 420, "bert", 2, 24},
		{"cifar10-9", 500, "cifar10", 1, 256},
	}
	return slices.Clone(base[:min(n, len(base))])
}
