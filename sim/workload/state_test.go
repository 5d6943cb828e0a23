package workload

import (
	"fmt"
	"strings"
	"testing"
)

func newState(t *testing.T, sp Spec, thr *Throughputs) *State {
	t.Helper()
	st, err := NewState(sp, thr)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func spec(model string, bs0, sf int, mode Mode, steps int64) Spec {
	return Spec{JobType: JobType(model, bs0), Model: model, BatchSize: bs0, ScaleFactor: sf, Mode: mode, TotalSteps: steps}
}

func TestNewState_StartsAtBs0WithTheTraceSteps(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	st := newState(t, job35(), thr)
	v, _ := thr.Lookup("ResNet-50 (batch size 32)", 1)
	if st.BatchSize != 32 || st.TotalSteps != 29992 || st.Done != 0 || st.Throughput != v || st.Grow || st.Shrink {
		t.Errorf("got %+v", st)
	}
	if _, err := NewState(spec(Recommendation, 512, 2, Static, 10), thr); err == nil || !strings.Contains(err.Error(), "on 2 GPUs") {
		t.Errorf("missing entry: got %v", err)
	}
	if _, err := NewState(spec(Transformer, 256, 1, Static, 10), thr); err != nil {
		t.Errorf("a zero entry is present: got %v", err)
	}
}

func TestRuntimeEpoch_OneStepIntoAnEpochCountsAsTheNext(t *testing.T) {
	st := newState(t, job35(), mustBuiltin(t, "tacc"))
	for _, c := range [][2]int64{{0, 0}, {1, 1}, {3125, 1}, {3126, 2}, {29334, 10}} {
		st.Done = c[0]
		if got := st.RuntimeEpoch(); got != int(c[1]) {
			t.Errorf("done %d: epoch %d, want %d", c[0], got, c[1])
		}
	}
}

// TestRescale_Job35GrowsToBmaxAndOvershoots is the example of spec §3.5:
// job 35 (ResNet-50 bs32 accordion) at done 29334 of 29992 reaches run-time
// epoch 10, which is not critical, so it grows to Bmax = 128; rounding its
// completed epochs up leaves done 7820 of 7498.
func TestRescale_Job35GrowsToBmaxAndOvershoots(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := job35()
	st := newState(t, sp, thr)
	st.Done = 29334
	st.SetFlags(sp)
	if !st.Grow || st.Shrink {
		t.Fatalf("flags grow=%v shrink=%v, want grow", st.Grow, st.Shrink)
	}
	if !st.Rescale(sp, thr) {
		t.Fatal("rescale not applied")
	}
	v, _ := thr.Lookup("ResNet-50 (batch size 128)", 1)
	if st.BatchSize != 128 || st.Done != 7820 || st.TotalSteps != 7498 || st.Throughput != v || st.Grow || st.Shrink {
		t.Errorf("got %+v, want bs 128, done 7820 of 7498, θ %v, flags clear", st, v)
	}
	if st.Done <= st.TotalSteps {
		t.Error("the overshoot of spec §3.5 is intended")
	}
}

func TestRescale_RoundsCompletedEpochsUp(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := job35()
	st := newState(t, sp, thr)
	st.Done = 3125*3 + 1 // one step into the fourth epoch
	st.Grow = true
	st.Rescale(sp, thr)
	if st.Done != 4*782 {
		t.Errorf("done %d, want 4 epochs of 782", st.Done)
	}
}

// TestRescale_KeepsEpochCountWhenStepsWouldDropAnEpoch: 3126 steps at bs32
// are 2 epochs of ResNet-50; a quarter is 782 steps, a single epoch at
// bs128, so the total becomes 2·782 instead (spec §2.5 step 5).
func TestRescale_KeepsEpochCountWhenStepsWouldDropAnEpoch(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := job35()
	sp.TotalSteps = 3126
	st := newState(t, sp, thr)
	st.Grow = true
	st.Rescale(sp, thr)
	if st.TotalSteps != 2*782 || st.Done != 0 {
		t.Errorf("total %d done %d, want 1564, 0", st.TotalSteps, st.Done)
	}
}

// TestRescale_ShrinkMultipliesStepsAndKeepsEpochs: an LM accordion job back
// at bs0 = 5 from 80 (746 → 11935 steps per epoch). 16 × 2238 = 35808 steps
// would be 4 epochs at bs5; the fix keeps 3 (35805).
func TestRescale_ShrinkMultipliesStepsAndKeepsEpochs(t *testing.T) {
	thr := mustBuiltin(t, "wisr")
	sp := spec(LM, 5, 1, Accordion, 100000)
	st := newState(t, sp, thr)
	st.BatchSize, st.TotalSteps, st.Done = 80, 746*3, 746
	st.Shrink = true
	if !st.Rescale(sp, thr) {
		t.Fatal("not applied")
	}
	v, _ := thr.Lookup("LM (batch size 5)", 1)
	if st.BatchSize != 5 || st.TotalSteps != 11935*3 || st.Done != 11935 || st.Throughput != v {
		t.Errorf("got %+v", st)
	}
}

func TestRescale_RejectsWhenBs0IsTheModelMaximum(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	for _, sp := range []Spec{
		spec(ResNet18, 256, 1, GNS, 1000), spec(LM, 80, 2, Accordion, 1000),
		spec(ResNet50, 128, 1, GNS, 1000), spec(Recommendation, 8192, 1, Accordion, 1000),
	} {
		st := newState(t, sp, thr)
		st.Done = 10
		st.Grow, st.Shrink = true, true
		before := *st
		before.Grow, before.Shrink = false, false
		if st.Rescale(sp, thr) || *st != before {
			t.Errorf("%s: got %+v, want unchanged with flags cleared", sp.JobType, st)
		}
	}
}

func TestRescale_RevertsWhenTheNewTypeIsNotInTheTable(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := spec(LM, 40, 1, GNS, 100000)
	st := newState(t, sp, thr)
	st.BatchSize = 80 // doubling gives LM bs160, absent from the file
	st.Grow = true
	before := *st
	before.Grow = false
	if st.Rescale(sp, thr) || *st != before {
		t.Errorf("got %+v, want %+v", st, before)
	}
}

func TestRescale_ZeroEntryCountsAsPresent(t *testing.T) {
	thr, err := ReadThroughputs(strings.NewReader(`{"v100": {
		"('ResNet-18 (batch size 64)', 1)": {"null": 20},
		"('ResNet-18 (batch size 128)', 1)": {"null": 0}}}`), "t")
	if err != nil {
		t.Fatal(err)
	}
	sp := spec(ResNet18, 64, 1, GNS, 10000)
	st := newState(t, sp, thr)
	st.Grow = true
	if !st.Rescale(sp, thr) || st.BatchSize != 128 || st.Throughput != 0 {
		t.Errorf("got %+v", st)
	}
}

func TestRescale_WithoutFlagsDoesNothing(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := job35()
	st := newState(t, sp, thr)
	st.Done = 5
	before := *st
	if st.Rescale(sp, thr) || *st != before {
		t.Errorf("got %+v", st)
	}
}

func TestSetFlags_GNSGrowsOneEpochBeforeTheScheduledDoubling(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := spec(ResNet18, 128, 1, GNS, 1e6) // ×2 from epoch 11
	ipe := int64(IterationsPerEpoch(ResNet18, 128))
	st := newState(t, sp, thr)
	st.Done = 9 * ipe // epoch 9: pattern[10] = 128
	st.SetFlags(sp)
	if st.Grow {
		t.Fatal("grew at epoch 9")
	}
	st.Done = 9*ipe + 1 // epoch 10: pattern[11] = 256
	st.SetFlags(sp)
	if !st.Grow {
		t.Fatal("no grow at epoch 10")
	}
	st.Rescale(sp, thr)
	if st.BatchSize != 256 {
		t.Fatalf("bs %d", st.BatchSize)
	}
	st.SetFlags(sp)
	if st.Grow {
		t.Error("grew past the model top")
	}
}

func TestSetFlags_GNSDoublesStepByStepTowardTheSegmentSize(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := spec(LM, 10, 1, GNS, 1e7) // ×8 from epoch 41
	st := newState(t, sp, thr)
	st.Done = int64(IterationsPerEpoch(LM, 10)) * 60
	var seen []int
	for range 5 {
		st.SetFlags(sp)
		if !st.Grow {
			break
		}
		st.Rescale(sp, thr)
		seen = append(seen, st.BatchSize)
	}
	if len(seen) != 3 || seen[0] != 20 || seen[1] != 40 || seen[2] != 80 {
		t.Errorf("batch sizes %v, want 20 40 80", seen)
	}
}

func TestSetFlags_GNSLooksPastThe760EpochHorizon(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := spec(ResNet18, 128, 1, GNS, 1e9)
	st := newState(t, sp, thr)
	st.Done = int64(IterationsPerEpoch(ResNet18, 128)) * 900
	st.SetFlags(sp)
	if !st.Grow {
		t.Error("no grow at epoch 900")
	}
}

func TestSetFlags_StaticAndTransformerNeverChange(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	for _, sp := range []Spec{spec(ResNet18, 32, 1, Static, 1e6), spec(Transformer, 16, 1, Accordion, 1e6), spec(Transformer, 16, 1, GNS, 1e6)} {
		st := newState(t, sp, thr)
		for _, d := range []int64{0, 1, 1000, 99999} {
			st.Done = d
			st.SetFlags(sp)
			if st.Grow || st.Shrink {
				t.Errorf("%s %s at done %d set a flag", sp.Mode, sp.JobType, d)
			}
		}
	}
}

// TestSetFlags_AccordionRuntimeCriticalSetsDifferFromThePlan checks the
// run-time rules of spec §2.5 against the planned ones of §2.3.
func TestSetFlags_AccordionRuntimeCriticalSetsDifferFromThePlan(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	cases := []struct {
		name      string
		sp        Spec
		epoch     int
		atBmax    bool // current bs is Bmax (else bs0)
		grow      bool
		shrink    bool
		planIsBs0 bool // the plan (E = 1000) has bs0 at this epoch
	}{
		{"Recommendation: no 60-70 window at run time", spec(Recommendation, 4096, 1, Accordion, 0), 65, false, true, false, true},
		{"Recommendation: no 80-90 window at run time", spec(Recommendation, 512, 1, Accordion, 0), 85, false, true, false, true},
		{"Recommendation bs2048: head 40 at run time", spec(Recommendation, 2048, 1, Accordion, 0), 39, true, false, true, true},
		{"ResNet-50: windows continue past 600 at run time", spec(ResNet50, 32, 1, Accordion, 0), 605, true, false, true, false},
		{"ResNet-50: epoch 10 leaves the first window", spec(ResNet50, 32, 1, Accordion, 0), 10, false, true, false, true},
		{"No 30 % rule at run time", spec(LM, 5, 1, Accordion, 0), 10, false, true, false, true},
		{"LM at Bmax stays while non-critical", spec(LM, 5, 1, Accordion, 0), 400, true, false, false, false},
		{"ResNet-18: window 150-160 shrinks", spec(ResNet18, 64, 1, Accordion, 0), 155, true, false, true, true},
		{"ResNet-18 bs256 is already the top", spec(ResNet18, 256, 1, Accordion, 0), 50, false, false, false, true},
	}
	for _, c := range cases {
		bs := c.sp.BatchSize
		if c.atBmax {
			bs = MaxBatchSize(c.sp.Model)
		}
		st := newState(t, c.sp, thr)
		st.BatchSize = bs
		st.Done = int64(c.epoch) * int64(IterationsPerEpoch(c.sp.Model, bs))
		if st.RuntimeEpoch() != c.epoch {
			t.Fatalf("%s: epoch %d", c.name, st.RuntimeEpoch())
		}
		st.SetFlags(c.sp)
		if st.Grow != c.grow || st.Shrink != c.shrink {
			t.Errorf("%s: grow %v shrink %v, want %v %v", c.name, st.Grow, st.Shrink, c.grow, c.shrink)
		}
		plan := PlannedBatchSizes(c.sp.Model, c.sp.BatchSize, 1, 1000, Accordion)
		if (plan[c.epoch] == c.sp.BatchSize) != c.planIsBs0 {
			t.Errorf("%s: planned bs %d at epoch %d", c.name, plan[c.epoch], c.epoch)
		}
	}
}

func TestSetFlags_FlagsPersistUntilConsumed(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := job35()
	st := newState(t, sp, thr)
	st.Done = 3125*10 + 1 // epoch 11: not critical
	st.SetFlags(sp)
	st.Done = 1 // epoch 1: critical, no rule fires at bs0
	st.SetFlags(sp)
	if !st.Grow {
		t.Error("grow flag was cleared by SetFlags")
	}
}

func TestRescale_NonPositiveBatchSizeIsRevertedNotAPanic(t *testing.T) {
	thr := mustBuiltin(t, "tacc")
	sp := job35()
	st := &State{BatchSize: 0, TotalSteps: 10, Grow: true}
	if st.Rescale(sp, thr) || st.Grow || st.BatchSize != 0 {
		t.Errorf("got %+v", st)
	}
	if st.Rescale(sp, nil) {
		t.Error("rescaled without a table")
	}
}

// ExampleState_Rescale replays the overshoot of spec §3.5 (job 35 of the
// 120-job trace).
func ExampleState_Rescale() {
	thr, _ := Builtin("tacc")
	sp := Spec{JobType: "ResNet-50 (batch size 32)", Model: ResNet50, BatchSize: 32,
		TotalSteps: 29992, ScaleFactor: 1, Mode: Accordion}
	st, _ := NewState(sp, thr)
	st.Done = 29334
	st.SetFlags(sp) // run-time epoch ceil(29334/3125) = 10 is not critical
	fmt.Println("epoch", st.RuntimeEpoch(), "grow", st.Grow)
	st.Rescale(sp, thr)
	fmt.Printf("bs %d: done %d of %d\n", st.BatchSize, st.Done, st.TotalSteps)
	// Output:
	// epoch 10 grow true
	// bs 128: done 7820 of 7498
}
