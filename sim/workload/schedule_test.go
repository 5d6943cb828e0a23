package workload

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// runs builds a pattern from (value, count) pairs.
func runs(pairs ...int) []int {
	var out []int
	for i := 0; i < len(pairs); i += 2 {
		for range pairs[i+1] {
			out = append(out, pairs[i])
		}
	}
	return out
}

func TestPlannedBatchSizes_GNSFollowsTheSegmentTable(t *testing.T) {
	cases := []struct {
		name    string
		model   string
		bs0, sf int
		E       int
		want    []int
	}{
		{"ResNet-18 bs128 sf1: one open segment from 11, reaching the last epoch",
			ResNet18, 128, 1, 20, runs(128, 11, 256, 9)},
		{"ResNet-18 bs128 sf1: E at the first start leaves bs0",
			ResNet18, 128, 1, 11, runs(128, 11)},
		{"ResNet-18 bs128 sf1: E one past the first start",
			ResNet18, 128, 1, 12, runs(128, 11, 256, 1)},
		{"ResNet-18 bs64 sf1: the later open segment stops at E-1",
			ResNet18, 64, 1, 40, runs(64, 11, 128, 20, 256, 8, 64, 1)},
		{"ResNet-18 bs16 sf1: a closed later segment cut at E-1",
			ResNet18, 16, 1, 45, runs(16, 31, 32, 10, 64, 3, 16, 1)},
		{"ResNet-18 bs16 sf1: a later segment ending exactly at E loses its last epoch",
			ResNet18, 16, 1, 51, runs(16, 31, 32, 10, 64, 9, 16, 1)},
		{"ResNet-18 bs16 sf1: all four segments",
			ResNet18, 16, 1, 80, runs(16, 31, 32, 10, 64, 10, 128, 20, 256, 8, 16, 1)},
		{"ResNet-18 bs128 sf2: the first segment reaches the last epoch",
			ResNet18, 128, 2, 50, runs(128, 41, 256, 9)},
		{"ResNet-18 bs32 sf2",
			ResNet18, 32, 2, 50, runs(32, 11, 64, 10, 128, 20, 256, 8, 32, 1)},
		{"ResNet-50 bs32 sf4",
			ResNet50, 32, 4, 230, runs(32, 131, 64, 90, 128, 8, 32, 1)},
		{"LM bs5 sf4",
			LM, 5, 4, 100, runs(5, 11, 10, 20, 20, 40, 40, 20, 80, 8, 5, 1)},
		{"LM bs40 sf4 starts at 61",
			LM, 40, 4, 70, runs(40, 61, 80, 9)},
		{"Recommendation bs1024 sf1",
			Recommendation, 1024, 1, 100, runs(1024, 21, 2048, 30, 4096, 40, 8192, 8, 1024, 1)},
		{"Recommendation bs4096 sf1",
			Recommendation, 4096, 1, 45, runs(4096, 41, 8192, 4)},
		{"sf 8 is not in the table", ResNet18, 32, 8, 100, runs(32, 100)},
		{"Transformer never changes", Transformer, 16, 1, 100, runs(16, 100)},
		{"ResNet-50 bs32 on one GPU is not in the table", ResNet50, 32, 1, 300, runs(32, 300)},
		{"ResNet-50 bs16 is not in the table", ResNet50, 16, 2, 300, runs(16, 300)},
		{"ResNet-18 bs256 is not in the table", ResNet18, 256, 1, 100, runs(256, 100)},
		{"LM bs80 is not in the table", LM, 80, 1, 100, runs(80, 100)},
		{"Recommendation bs8192 is not in the table", Recommendation, 8192, 1, 100, runs(8192, 100)},
		{"no epochs", ResNet18, 64, 1, 0, nil},
	}
	for _, c := range cases {
		got := PlannedBatchSizes(c.model, c.bs0, c.sf, c.E, GNS)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, c.want)
		}
	}
}

// TestPlannedBatchSizes_GNSLastEpochIsBs0UnlessInTheFirstSegment checks the
// truncation quirk of spec §2.3 over the whole table and every E up to 300.
func TestPlannedBatchSizes_GNSLastEpochIsBs0UnlessInTheFirstSegment(t *testing.T) {
	for k, segs := range gnsSegments {
		long := PlannedBatchSizes(k.model, k.bs0, k.sf, 1000, GNS)
		for E := 1; E <= 300; E++ {
			p := PlannedBatchSizes(k.model, k.bs0, k.sf, E, GNS)
			last := p[E-1]
			inFirst := E > segs[0].start && (segs[0].end == 0 || E-1 < segs[0].end)
			switch {
			case inFirst && last != min(k.bs0*segs[0].mult, MaxBatchSize(k.model)):
				t.Fatalf("%v E=%d: last epoch %d, want the first segment's size", k, E, last)
			case !inFirst && last != k.bs0:
				t.Fatalf("%v E=%d: last epoch %d, want bs0 %d", k, E, last, k.bs0)
			}
			for e, bs := range p {
				if bs > MaxBatchSize(k.model) || bs < k.bs0 {
					t.Fatalf("%v E=%d epoch %d: %d outside [bs0, top]", k, E, e, bs)
				}
			}
			// Away from the last epoch the pattern does not depend on E.
			if E > segs[0].start && !slices.Equal(p[:E-1], long[:E-1]) {
				t.Fatalf("%v E=%d: prefix differs from the long pattern", k, E)
			}
		}
	}
}

func TestPlannedBatchSizes_AccordionUsesStrictThirtyPercentAndPlannedCriticalSets(t *testing.T) {
	cases := []struct {
		name   string
		model  string
		bs0, E int
		want   []int
	}{
		{"job 35: ResNet-50 bs32, E=10, all critical", ResNet50, 32, 10, runs(32, 10)},
		// 0.3·40 = 12: epochs 10..12 are non-critical but not > 12.
		{"LM: strict e > 0.3·E", LM, 5, 40, runs(5, 13, 80, 27)},
		{"LM: critical e < 10 beats the 30 % rule", LM, 20, 20, runs(20, 10, 80, 10)},
		{"ResNet-50: (e mod 30) < 10 windows", ResNet50, 32, 100,
			runs(32, 40, 128, 20, 32, 10, 128, 20, 32, 10)},
		{"ResNet-18 bs64: head 10 and windows 150-160, 250-260", ResNet18, 64, 270,
			runs(64, 82, 256, 68, 64, 10, 256, 90, 64, 10, 256, 10)},
		{"ResNet-18 bs256: head 20", ResNet18, 256, 30, runs(256, 30)},
		{"Recommendation bs4096: head 10, windows 60-70 and 80-90", Recommendation, 4096, 100,
			runs(4096, 31, 8192, 29, 4096, 10, 8192, 10, 4096, 10, 8192, 10)},
		{"Recommendation bs2048: head 40", Recommendation, 2048, 50, runs(2048, 40, 8192, 10)},
		{"Recommendation bs512: head 30", Recommendation, 512, 50, runs(512, 30, 8192, 20)},
		{"Transformer never changes", Transformer, 16, 100, runs(16, 100)},
	}
	for _, c := range cases {
		got := PlannedBatchSizes(c.model, c.bs0, 1, c.E, Accordion)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, c.want)
		}
	}
	// ResNet-50 has no critical windows from epoch 600 on in the plan.
	p := PlannedBatchSizes(ResNet50, 32, 1, 700, Accordion)
	if p[595] != 128 || p[599] != 128 || p[600] != 128 || p[605] != 128 || p[590] != 128 || p[575] != 32 {
		t.Errorf("ResNet-50 around epoch 600: %v", p[565:610])
	}
}

func TestPlannedBatchSizes_StaticKeepsBs0(t *testing.T) {
	if got := PlannedBatchSizes(ResNet18, 64, 1, 100, Static); !slices.Equal(got, runs(64, 100)) {
		t.Errorf("got %v", got)
	}
}

// TestNewProfile_Job35WorkedExample is the example of spec §2.4.
func TestNewProfile_Job35WorkedExample(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := job35()
	p, err := NewProfile(sp, thr)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := thr.Lookup("ResNet-50 (batch size 32)", 1)
	if p.Epochs != 10 || !slices.Equal(p.BatchSizes, runs(32, 10)) {
		t.Fatalf("E %d, batch sizes %v", p.Epochs, p.BatchSizes)
	}
	for e, d := range p.EpochSeconds {
		if d != 3125/v {
			t.Errorf("epoch %d: %v s, want 3125/%v", e, d, v)
		}
	}
	if math.Abs(p.IsolatedSeconds-10*3125/v) > 1e-9 || math.Abs(p.IsolatedSeconds-5297.2) > 0.05 {
		t.Errorf("T_iso = %v, want ≈ 5297.2 (10·3125/%v)", p.IsolatedSeconds, v)
	}
	if p.IsolatedSeconds <= sp.Duration {
		t.Errorf("T_iso %v should exceed the trace duration %v (partial last epoch)", p.IsolatedSeconds, sp.Duration)
	}
}

func TestNewProfile_EpochDurationsUseThatEpochsBatchSize(t *testing.T) {
	thr := mustBuiltin(t, "wisr")
	sp := Spec{JobType: JobType(ResNet18, 128), Model: ResNet18, BatchSize: 128, ScaleFactor: 2, Mode: GNS,
		TotalSteps: int64(IterationsPerEpoch(ResNet18, 128)) * 50}
	p, err := NewProfile(sp, thr)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for e, bs := range p.BatchSizes {
		v, _ := thr.Lookup(JobType(ResNet18, bs), 2)
		if want := 50000.0 / float64(bs) / v; p.EpochSeconds[e] != want {
			t.Errorf("epoch %d (bs %d): %v, want %v", e, bs, p.EpochSeconds[e], want)
		}
		sum += p.EpochSeconds[e]
	}
	if p.BatchSizes[40] != 128 || p.BatchSizes[41] != 256 || p.BatchSizes[49] != 256 || p.IsolatedSeconds != sum {
		t.Errorf("pattern %v, T_iso %v vs Σ %v", p.BatchSizes, p.IsolatedSeconds, sum)
	}
}

func TestNewProfile_FailsOnMissingOrZeroThroughput(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	cases := []Spec{
		{JobType: JobType(Recommendation, 512), Model: Recommendation, BatchSize: 512, ScaleFactor: 2, Mode: Static, TotalSteps: 100},
		{JobType: JobType(Transformer, 256), Model: Transformer, BatchSize: 256, ScaleFactor: 1, Mode: Static, TotalSteps: 100},
		{JobType: "x", Model: "x", BatchSize: 1, ScaleFactor: 1, TotalSteps: 1},
	}
	for _, sp := range cases {
		if _, err := NewProfile(sp, thr); err == nil {
			t.Errorf("%s on %d GPUs: no error", sp.JobType, sp.ScaleFactor)
		}
	}
}

// TestNewProfile_EveryReferenceJobHasAProfile builds the profile of every
// job of the reference traces with their tables.
func TestNewProfile_EveryReferenceJobHasAProfile(t *testing.T) {
	for _, rt := range referenceTraces {
		thr := mustBuiltin(t, rt.thr)
		for _, sp := range readReference(t, rt.file) {
			p, err := NewProfile(sp, thr)
			if err != nil {
				t.Fatalf("%s job %d: %v", rt.file, sp.ID, err)
			}
			if p.Epochs < 1 || !(p.IsolatedSeconds > 0) {
				t.Fatalf("%s job %d: %+v", rt.file, sp.ID, p)
			}
		}
	}
}

func mustBuiltin(t *testing.T, name string) *Throughputs {
	t.Helper()
	thr, err := Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return thr
}

// job35 is line 36 of the 120-job trace (spec §2.4, §3.5).
func job35() Spec {
	return Spec{ID: 35, JobType: "ResNet-50 (batch size 32)", Model: ResNet50, BatchSize: 32,
		TotalSteps: 29992, ScaleFactor: 1, Mode: Accordion, PriorityWeight: 1, SLO: -1, Duration: 5084, Arrival: 1655}
}

func ExampleNewProfile() {
	thr, _ := Builtin("tacc")
	// Job 35 of the 120-job trace (spec §2.4).
	sp := Spec{JobType: "ResNet-50 (batch size 32)", Model: ResNet50, BatchSize: 32,
		TotalSteps: 29992, ScaleFactor: 1, Mode: Accordion}
	p, _ := NewProfile(sp, thr)
	fmt.Printf("E=%d bs=%v T_iso=%.1f s\n", p.Epochs, p.BatchSizes, p.IsolatedSeconds)
	// Output: E=10 bs=[32 32 32 32 32 32 32 32 32 32] T_iso=5297.2 s
}
