package workload

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"
)

func generate(t *testing.T, n int, seed uint64, opt GenerateOptions) []Spec {
	t.Helper()
	specs, err := Generate(n, seed, mustBuiltin(t, "tacc"), opt)
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func traceBytes(t *testing.T, specs []Spec) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteTrace(&b, specs); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestGenerate_SameSeedSameBytesOtherSeedOtherBytes(t *testing.T) {
	a := traceBytes(t, generate(t, 200, 25, GenerateOptions{}))
	b := traceBytes(t, generate(t, 200, 25, GenerateOptions{}))
	c := traceBytes(t, generate(t, 200, 26, GenerateOptions{}))
	if !bytes.Equal(a, b) {
		t.Error("same seed, different traces")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds, same trace")
	}
}

func TestGenerate_OutputParsesBackIdentically(t *testing.T) {
	specs := generate(t, 300, 7, GenerateOptions{})
	back, err := ParseTrace(bytes.NewReader(traceBytes(t, specs)), "gen")
	if err != nil {
		t.Fatal(err)
	}
	for i := range specs {
		if back[i] != specs[i] {
			t.Fatalf("job %d: %+v\nparsed back as %+v", i, specs[i], back[i])
		}
	}
}

// TestGenerate_FollowsTheGenerationRules checks, per job, the rules of spec
// §1 that hold exactly.
func TestGenerate_FollowsTheGenerationRules(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	specs := generate(t, 2000, 1, GenerateOptions{})
	grid := map[float64]bool{}
	for i := range 100 {
		grid[math.RoundToEven(3600*(0.2+float64(i)*(4.8/99)))] = true
	}
	grid[18000] = true
	for i, sp := range specs {
		v, _ := thr.Lookup(sp.JobType, sp.ScaleFactor)
		switch {
		case sp.ID != i:
			t.Fatalf("job %d has id %d", i, sp.ID)
		case i == 0 && sp.Arrival != 0:
			t.Fatalf("first arrival %v", sp.Arrival)
		case i > 0 && sp.Arrival < specs[i-1].Arrival, sp.Arrival != math.Trunc(sp.Arrival):
			t.Fatalf("job %d arrival %v after %v", i, sp.Arrival, specs[i-1].Arrival)
		case !grid[sp.Duration]:
			t.Fatalf("job %d duration %v is not a candidate", i, sp.Duration)
		case sp.Model == Recommendation && sp.ScaleFactor != 1:
			t.Fatalf("job %d: distributed Recommendation", i)
		case sp.Mode == Accordion && sp.Duration < 1000:
			t.Fatalf("job %d: accordion job of %v s", i, sp.Duration)
		case sp.TotalSteps != int64(math.Floor(sp.Duration*v)):
			t.Fatalf("job %d: total_steps %d, want floor(%v × %v)", i, sp.TotalSteps, sp.Duration, v)
		case !strings.Contains(sp.Command, " "+strconv.Itoa(sp.BatchSize)) || sp.WorkingDir == "" || sp.NumStepsArg == "":
			t.Fatalf("job %d: command fields %q %q %q", i, sp.Command, sp.WorkingDir, sp.NumStepsArg)
		case sp.PriorityWeight != 1 || sp.SLO != -1 || !sp.NeedsDataDir:
			t.Fatalf("job %d: %+v", i, sp)
		}
		if _, err := NewProfile(sp, thr); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
}

// TestGenerate_StatisticsMatchTheMixes draws 2000 jobs and compares the
// frequencies with their expectations (loose margins, about 4 σ).
func TestGenerate_StatisticsMatchTheMixes(t *testing.T) {
	specs := generate(t, 2000, 42, GenerateOptions{})
	n := float64(len(specs))
	var modes = map[Mode]float64{}
	var sf = map[int]float64{}
	var models = map[string]float64{}
	dur := 0.0
	for _, sp := range specs {
		modes[sp.Mode]++
		sf[sp.ScaleFactor]++
		models[sp.Model]++
		dur += sp.Duration
	}
	// 16 of 21 templates draw sf from (0.6, 0.3, 0.09, 0.01); Recommendation
	// (5 of 21) always has 1. Durations below 1000 s are the first 2 of the
	// 20 candidates of the 0.72 bucket, so 0.5·0.072 of the jobs are
	// static accordion jobs.
	dist := 16.0 / 21
	checks := []struct {
		what      string
		got, want float64
		margin    float64
	}{
		{"sf 1", sf[1] / n, 5.0/21 + dist*0.6, 0.04},
		{"sf 2", sf[2] / n, dist * 0.3, 0.04},
		{"sf 4", sf[4] / n, dist * 0.09, 0.025},
		{"sf 8", sf[8] / n, dist * 0.01, 0.01},
		{"gns", modes[GNS] / n, 0.5, 0.05},
		{"accordion", modes[Accordion] / n, 0.5 * (1 - 0.072), 0.05},
		{"static", modes[Static] / n, 0.5 * 0.072, 0.02},
		{"Recommendation", models[Recommendation] / n, 5.0 / 21, 0.04},
		{"LM", models[LM] / n, 5.0 / 21, 0.04},
		{"ResNet-50", models[ResNet50] / n, 3.0 / 21, 0.035},
		{"mean duration (s)", dur / n, 4220, 400},
		{"mean inter-arrival (s)", specs[len(specs)-1].Arrival / (n - 1), 40, 4},
	}
	for _, c := range checks {
		if math.Abs(c.got-c.want) > c.margin {
			t.Errorf("%s: %.4f, want %.4f ± %v", c.what, c.got, c.want, c.margin)
		}
	}
	if len(sf) != 4 || len(modes) != 3 || len(models) != 5 {
		t.Errorf("sf %v, modes %v, models %v", sf, modes, models)
	}
}

func TestGenerate_HonoursOptions(t *testing.T) {
	specs := generate(t, 500, 3, GenerateOptions{
		MinDurationHours: 1, MaxDurationHours: 2, NumDurations: 3, MeanInterArrival: 5,
		ModeMix: [3]float64{1, 0, 0}, ScaleFactorMix: [4]float64{0, 0, 0, 1},
	})
	for _, sp := range specs {
		if sp.Mode != Static || (sp.Model != Recommendation && sp.ScaleFactor != 8) ||
			(sp.Duration != 3600 && sp.Duration != 5400 && sp.Duration != 7200) {
			t.Fatalf("%+v", sp)
		}
	}
	if mean := specs[len(specs)-1].Arrival / 499; math.Abs(mean-5) > 1 {
		t.Errorf("mean inter-arrival %v, want ≈ 5", mean)
	}
}

func TestGenerate_OneDurationCandidateAlwaysDrawsIt(t *testing.T) {
	for _, sp := range generate(t, 50, 9, GenerateOptions{NumDurations: 1, MinDurationHours: 1}) {
		if sp.Duration != 3600 {
			t.Fatalf("duration %v", sp.Duration)
		}
	}
}

func TestGenerate_RejectsBadInput(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	cases := []struct {
		n    int
		thr  *Throughputs
		opt  GenerateOptions
		want string
	}{
		{0, thr, GenerateOptions{}, "job count 0"},
		{5, nil, GenerateOptions{}, "no throughput table"},
		{5, thr, GenerateOptions{MinDurationHours: -1}, "minimum duration"},
		{5, thr, GenerateOptions{MaxDurationHours: 0.1}, "maximum duration"},
		{5, thr, GenerateOptions{NumDurations: -2}, "duration candidates"},
		{5, thr, GenerateOptions{MeanInterArrival: math.NaN()}, "inter-arrival"},
		{5, thr, GenerateOptions{ModeMix: [3]float64{-1, 1, 1}}, "mode mix"},
		{5, thr, GenerateOptions{ScaleFactorMix: [4]float64{0, math.Inf(1), 0, 0}}, "scale-factor mix"},
	}
	for _, c := range cases {
		_, err := Generate(c.n, 1, c.thr, c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.opt, err, c.want)
		}
	}
	tiny, err := ReadThroughputs(strings.NewReader(`{"v100": {"('LM (batch size 5)', 1)": {"null": 1}}}`), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(50, 1, tiny, GenerateOptions{}); err == nil || !strings.Contains(err.Error(), "no throughput for") {
		t.Errorf("incomplete table: %v", err)
	}
}
