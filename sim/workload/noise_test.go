package workload

import (
	"math"
	"testing"
)

func gnsSpec(id int) Spec {
	return Spec{ID: id, JobType: JobType(ResNet18, 16), Model: ResNet18, BatchSize: 16, TotalSteps: 3125 * 150,
		ScaleFactor: 1, Mode: GNS, PriorityWeight: 1}
}

func TestNoise_ZeroValueKeepsTheDeterministicModel(t *testing.T) {
	if r := (Noise{Seed: 7}).Realize(gnsSpec(0)); r != nil {
		t.Fatalf("zero noise drew a realization: %+v", r)
	}
}

func TestNoise_SameSeedSameDrawsOtherSeedOtherDraws(t *testing.T) {
	n := Noise{Seed: 3, ScheduleJitter: 5, ThroughputNoise: 0.1, RoundNoise: 0.05, CancelRate: 0.5}
	a, b := n.Realize(gnsSpec(4)), n.Realize(gnsSpec(4))
	for range 10 {
		if a.RoundFactor() != b.RoundFactor() {
			t.Fatal("same seed, different round factors")
		}
	}
	if a.Speed != b.Speed || a.EndAt != b.EndAt || a.End != b.End {
		t.Fatal("same seed, different static draws")
	}
	n.Seed = 4
	if c := n.Realize(gnsSpec(4)); c.Speed == a.Speed {
		t.Fatal("another seed drew the same speed")
	}
}

// TestNoise_SpeedFactorIsLogNormalWithSigma checks the spread of the
// per-job speed factors and the share of early ends over many jobs.
func TestNoise_SpeedFactorIsLogNormalWithSigmaAndEndsAtRate(t *testing.T) {
	n := Noise{Seed: 1, ThroughputNoise: 0.1, CancelRate: 0.2}
	const jobs = 4000
	var s, s2 float64
	ended := 0
	for i := range jobs {
		r := n.Realize(gnsSpec(i))
		l := math.Log(r.Speed)
		s += l
		s2 += l * l
		if r.End != RunsToEnd {
			ended++
			if !(r.EndAt > 0 && r.EndAt < 1) {
				t.Fatalf("job %d ends at %g", i, r.EndAt)
			}
		}
	}
	mean := s / jobs
	sd := math.Sqrt(s2/jobs - mean*mean)
	if math.Abs(mean) > 0.01 || math.Abs(sd-0.1) > 0.01 {
		t.Errorf("log speed mean %.4f sd %.4f, want 0 and 0.1", mean, sd)
	}
	if rate := float64(ended) / jobs; math.Abs(rate-0.2) > 0.02 {
		t.Errorf("early-end rate %.3f, want 0.2", rate)
	}
}

// switches runs a job alone epoch by epoch through SetFlags and Rescale
// and returns the epochs at which its batch size changed.
func switches(t *testing.T, sp Spec, r *Realization) []int {
	t.Helper()
	thr, err := Builtin("tacc")
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewState(sp, thr)
	if err != nil {
		t.Fatal(err)
	}
	st.Realize(sp, r)
	ipe := int64(IterationsPerEpoch(sp.Model, st.BatchSize))
	var out []int
	for e := 0; e < 400 && st.Done < st.TotalSteps; e++ {
		st.SetFlags(sp)
		ipe = int64(IterationsPerEpoch(sp.Model, st.BatchSize))
		st.Done += ipe
		if st.Rescale(sp, thr) {
			out = append(out, st.RuntimeEpoch())
		}
	}
	return out
}

// TestNoise_JitterMovesEverySwitchWithinBound checks the schedule jitter:
// the switches stay in order, each within ±E epochs of the deterministic
// one, and some jobs' switches do move.
func TestNoise_JitterMovesEverySwitchWithinBound(t *testing.T) {
	sp := gnsSpec(0)
	nominal := switches(t, sp, nil)
	if len(nominal) < 3 {
		t.Fatalf("nominal switches %v", nominal)
	}
	moved := 0
	for id := range 50 {
		sp.ID = id
		got := switches(t, sp, Noise{Seed: 9, ScheduleJitter: 5}.Realize(sp))
		if len(got) != len(nominal) {
			t.Fatalf("job %d: switches %v, nominal %v", id, got, nominal)
		}
		for k := range got {
			if d := got[k] - nominal[k]; d < -5 || d > 5 {
				t.Fatalf("job %d: switch %d at %d, nominal %d", id, k, got[k], nominal[k])
			}
			if got[k] != nominal[k] {
				moved++
			}
		}
	}
	if moved == 0 {
		t.Fatal("no switch moved")
	}
}

// TestNoise_AccordionRegimeLengthsVary checks that jitter changes how long
// an accordion job stays in a regime, not only when it starts.
func TestNoise_AccordionRegimeLengthsVary(t *testing.T) {
	sp := Spec{ID: 0, JobType: JobType(ResNet50, 64), Model: ResNet50, BatchSize: 64, TotalSteps: 1563 * 200,
		ScaleFactor: 1, Mode: Accordion, PriorityWeight: 1}
	nominal := switches(t, sp, nil)
	lengths := map[int]bool{}
	for id := range 20 {
		sp.ID = id
		got := switches(t, sp, Noise{Seed: 2, ScheduleJitter: 5}.Realize(sp))
		for k := 1; k < len(got); k++ {
			lengths[got[k]-got[k-1]] = true
		}
	}
	nomLengths := map[int]bool{}
	for k := 1; k < len(nominal); k++ {
		nomLengths[nominal[k]-nominal[k-1]] = true
	}
	if len(lengths) <= len(nomLengths) {
		t.Fatalf("regime lengths %v, nominal %v: jitter did not vary them", lengths, nomLengths)
	}
}

func TestNoise_ValidateRejectsOutOfRange(t *testing.T) {
	for _, n := range []Noise{{ScheduleJitter: -1}, {ThroughputNoise: math.NaN()}, {RoundNoise: -0.1}, {CancelRate: 1.5}, {ThroughputNoise: math.Inf(1)}} {
		if n.Validate() == nil {
			t.Errorf("%+v accepted", n)
		}
	}
}

// TestRealizedProfile_ScalesWithSpeed checks that the realized isolated
// time is the nominal one divided by the speed factor when only the speed
// is noisy.
func TestRealizedProfile_ScalesWithSpeed(t *testing.T) {
	thr, _ := Builtin("tacc")
	sp := gnsSpec(1)
	r := Noise{Seed: 5, ThroughputNoise: 0.2}.Realize(sp)
	p, _ := NewProfile(sp, thr)
	q, err := RealizedProfile(sp, thr, r)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := q.IsolatedSeconds, p.IsolatedSeconds/r.Speed; math.Abs(got-want) > 1e-6*want {
		t.Fatalf("realized %.3f, want %.3f", got, want)
	}
}
