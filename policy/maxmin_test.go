package policy

import (
	"math"
	"testing"
)

func TestMaxMinFairness_ContendedClusterGivesEveryJobEqualGPUTime(t *testing.T) {
	// m = 6 ≥ G = 4: x_i = G/(m·w_i), so w_i·x_i = 2/3 for everyone.
	s := optSnap(4, 0, optJob{w: 1}, optJob{w: 2}, optJob{w: 4}, optJob{w: 1}, optJob{w: 1}, optJob{w: 2})
	x, err := NewMaxMinFairness().Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range s.Jobs {
		if want := 4.0 / (6 * float64(j.Workers)); x[i] != want {
			t.Fatalf("x[%d] = %v, want %v", i, x[i], want)
		}
	}
}

func TestMaxMinFairness_UncontendedClusterRunsOneGPUJobsFully(t *testing.T) {
	// G = 4, a 1-GPU and a 2-GPU job: t* = 1, the 1-GPU job gets 1 and the
	// 2-GPU job the centre of [½, 1] under 2x ≤ 3:
	// max ln(x−½) + ln(1−x) + ln(3−2x), i.e. 6x² − 12x + 5.5 = 0.
	s := optSnap(4, 0, optJob{w: 1}, optJob{w: 2})
	x, err := NewMaxMinFairness().Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	want := (12 - math.Sqrt(12*12-4*6*5.5)) / 12
	if x[0] != 1 || math.Abs(x[1]-want) > 1e-12 {
		t.Fatalf("x = %v, want [1 %v]", x, want)
	}
}

func TestMaxMinFairness_WideJobsAloneRunFully(t *testing.T) {
	// Two 4-GPU jobs on 32 GPUs: t* = 4 = min w, both at x = 1.
	x, _ := NewMaxMinFairness().Allocate(optSnap(32, 0, optJob{w: 4}, optJob{w: 4}))
	if x[0] != 1 || x[1] != 1 {
		t.Fatalf("x = %v, want [1 1]", x)
	}
	// Ten 4-GPU jobs on 32 GPUs: t* = G/m = 3.2, x = 0.8.
	jobs := make([]optJob, 10)
	for i := range jobs {
		jobs[i] = optJob{w: 4}
	}
	x, _ = NewMaxMinFairness().Allocate(optSnap(32, 0, jobs...))
	for _, v := range x {
		if math.Abs(v-0.8) > 1e-15 {
			t.Fatalf("x = %v, want 0.8 each", x)
		}
	}
}

func TestMaxMinFairness_CentreKeepsEveryWideJobAboveItsFairShare(t *testing.T) {
	s := optSnap(32, 0, optJob{w: 1}, optJob{w: 2}, optJob{w: 4}, optJob{w: 8}, optJob{w: 8}, optJob{w: 2})
	x, _ := NewMaxMinFairness().Allocate(s)
	used := 0.0
	for i, j := range s.Jobs {
		w := float64(j.Workers)
		if w*x[i] < 1 || x[i] > 1 || (w > 1 && !(x[i] < 1)) {
			t.Fatalf("job %d (w=%v): x = %v", i, w, x[i])
		}
		used += w * x[i]
	}
	if !(used < 32) {
		t.Fatalf("Σ w·x = %v, the centre leaves slack", used)
	}
}
