package policy

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func metaFor(planned []int, secs []float64) *swMeta {
	j := &Job{ID: "j", Workers: 1, DatasetSize: 1000, InitialBatchSize: planned[0], PlannedBatchSizes: planned, PlannedEpochSeconds: secs}
	return newSWMeta(j, 0)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestRemaining_StaticJobCountsTheCurrentEpochAsObserved: with one
// batch-size mode the Dirichlet estimate of spec §4.3 reduces to
// (E − c − 1)·d, because the observed epochs 0..c include the epoch in
// progress (step 1 takes P[0..c] inclusive, step 4 removes one count each).
func TestRemaining_StaticJobCountsTheCurrentEpochAsObserved(t *testing.T) {
	m := metaFor([]int{32, 32, 32, 32, 32, 32, 32, 32, 32, 32}, []float64{50, 50, 50, 50, 50, 50, 50, 50, 50, 50})
	for c := 0; c <= 10; c++ {
		m.epoch = c
		want := float64(9-c) * 50
		if c == 10 {
			want = 1 // nothing left: the original returns 1.0 (§4.3 step 7)
		}
		if got := m.remaining(c); !near(got, want) {
			t.Errorf("c=%d: R̂ = %v, want %v", c, got, want)
		}
	}
}

// TestRemaining_TwoModesFollowTheDirichletPosterior checks §4.3 by hand on
// E=4, P=(32,32,64,64), D=(10,10,4,4) at c=p=1.
func TestRemaining_TwoModesFollowTheDirichletPosterior(t *testing.T) {
	m := metaFor([]int{32, 32, 64, 64}, []float64{10, 10, 4, 4})
	m.epoch = 1
	// α = 2 each; O = (32,32) → α' = (4, 2); n = 4·(4/6, 2/6) = (8/3, 4/3);
	// subtract one per observation while ≥ 1: n32 = 8/3−1−1 = 2/3;
	// rem = 3; infl = max(floor(2/3+4/3+1), 3) = 3; R̂ = (2/3·10 + 4/3·4)·3/3.
	want := 2.0/3*10 + 4.0/3*4
	if got := m.remaining(1); !near(got, want) {
		t.Fatalf("R̂ = %v, want %v", got, want)
	}
}

// TestTarget_MomentumAveragesEstimatesByTheirDuration checks §4.4.
func TestTarget_MomentumAveragesEstimatesByTheirDuration(t *testing.T) {
	m := metaFor([]int{32}, []float64{1})
	m.targets = []swTarget{{round: 0, value: 100}}
	if got := m.target(0); !near(got, 100) {
		t.Errorf("single estimate with zero weight: %v, want 100", got)
	}
	m.targets = []swTarget{{round: 0, value: 100}, {round: 4, value: 200}}
	// weights (4, 6) at R=10: avg = 0.4·100 + 0.6·200 = 160; F = 0.9·160 + 0.1·200.
	if got, want := m.target(10), 0.9*160+0.1*200; !near(got, want) {
		t.Errorf("F = %v, want %v", got, want)
	}
}

// TestCalibrate_OnlyBeyondFortyPercentDeviation checks §4.2: measured
// samples within 40 % of the profile leave durations alone; beyond, every
// epoch is rescaled by pre/meas.
func TestCalibrate_OnlyBeyondFortyPercentDeviation(t *testing.T) {
	// S = 1000 samples per epoch of 100 s at bs 10 → 1 step/s = 10 samples/s.
	m := metaFor([]int{10, 10, 10, 10}, []float64{100, 100, 100, 100})
	m.calibrate([]Measurement{{Round: 1, Throughput: 1.2, BatchSize: 10}}, 100)
	if dursOf(m)[0] != 100 {
		t.Fatalf("20 %% faster than planned recalibrated: %v", m.dur)
	}
	m.calibrate([]Measurement{{Round: 1, Throughput: 2, BatchSize: 10}}, 100)
	if d := dursOf(m); !near(d[0], 50) || !near(d[3], 50) {
		t.Fatalf("2× faster than planned: durations %v, want 50 each", m.dur)
	}
}

// TestConstantSchedule_WithoutAProfileEpochsComeFromTheSteps checks the
// fallback for a job that declared no schedule.
func TestConstantSchedule_WithoutAProfileEpochsComeFromTheSteps(t *testing.T) {
	j := &Job{Workers: 1, DatasetSize: 1000, InitialBatchSize: 100, TotalSteps: 35, Throughput: 2}
	bs, e, s := constantSchedule(j)
	if bs != 100 || e != 4 || !near(s, 5) {
		t.Fatalf("schedule of %d epochs of %v s at %d, want 4 epochs of 5 s at 100", e, s, bs)
	}
}

// TestDistinct_IsTheSortedCompactedScheduleInItsOwnSmallArray: the modes
// of a schedule are its sorted distinct batch sizes, held in an array of
// their own size (not the schedule's: thousands of epochs, a few modes).
func TestDistinct_IsTheSortedCompactedScheduleInItsOwnSmallArray(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 16))
	for range 300 {
		xs := make([]int, rng.IntN(3000))
		for i := range xs {
			switch {
			case i > 0 && rng.IntN(10) > 0:
				xs[i] = xs[i-1] // runs, as schedules have
			default:
				xs[i] = 16 << rng.IntN(5)
			}
		}
		want := slices.Compact(slices.Sorted(slices.Values(xs)))
		got := distinct(xs)
		if !slices.Equal(got, want) || cap(got) != len(got) {
			t.Fatalf("distinct: %v (cap %d), want %v", got, cap(got), want)
		}
	}
}
