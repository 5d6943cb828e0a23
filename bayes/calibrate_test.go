package bayes_test

import (
	"math"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
)

// TestCalibration_NarrowsABandThatIsTooWide runs identical static jobs one
// after another: every forecast is nearly exact, so the raw band is far too
// wide, and after enough completed jobs the calibrated band must shrink
// around the same mean, never move it.
func TestCalibration_NarrowsABandThatIsTooWide(t *testing.T) {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	width := func(id string) (float64, float64) {
		fc, err := f.Forecast(id)
		if err != nil {
			t.Fatal(err)
		}
		return fc.Remaining.P90 / fc.Remaining.P10, fc.Remaining.Mean
	}
	var first, last float64
	for i := range 40 {
		s := lmSpec(string(rune('a'+i%26)) + string(rune('a'+i/26)))
		s.Mode = "static"
		if err := f.Admit(s); err != nil {
			t.Fatal(err)
		}
		for k := int64(1); k <= 20; k++ {
			steps := min(k*s.TotalSteps/20, s.TotalSteps)
			if err := f.Observe(s.ID, bayes.Observation{StepsDone: steps, TotalSteps: s.TotalSteps, BatchSize: s.InitialBatchSize,
				Throughput: 100, Elapsed: float64(s.TotalSteps/20) / 100}); err != nil {
				t.Fatal(err)
			}
			if k == 2 {
				w, _ := width(s.ID)
				if i == 0 {
					first = w
				}
				last = w
			}
		}
		f.Complete(s.ID)
	}
	t.Logf("P90/P10 at 10 %%: first job %.4f, last %.4f, scale %.3f", first, last, f.BandScale())
	if !(f.BandScale() < 1) || !(last < first) {
		t.Fatalf("band not narrowed: first %.4f last %.4f scale %.3f", first, last, f.BandScale())
	}
}

// TestCalibration_HostileJobsCannotBlowUpTheBands: 40 jobs of a tenant's
// own model run normally and then report, before done, a last stretch of
// 10^9 execution seconds (valid: an event may carry 10^10), so that every
// band they kept missed the truth by a factor of e^20 or more. Each score
// is capped, so the learned factor stays at most calScoreMax (8) and
// another model's job keeps a band within what that factor allows.
// Without the cap the factor was 3,605 and this job's P90 6·10^90 against
// a mean of 1,075 s (a band 20 % wider overflows to +Inf, which the
// market refuses).
func TestCalibration_HostileJobsCannotBlowUpTheBands(t *testing.T) {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	victim := lmSpec("victim")
	if err := f.Admit(victim); err != nil {
		t.Fatal(err)
	}
	if err := f.Observe(victim.ID, bayes.Observation{StepsDone: victim.TotalSteps / 10, TotalSteps: victim.TotalSteps,
		BatchSize: victim.InitialBatchSize, Throughput: 100, Elapsed: float64(victim.TotalSteps/10) / 100}); err != nil {
		t.Fatal(err)
	}
	raw, err := f.Forecast(victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		s := lmSpec("evil-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		s.Model = "Evil"
		if err := f.Admit(s); err != nil {
			t.Fatal(err)
		}
		for k := int64(1); k <= 20; k++ {
			o := bayes.Observation{StepsDone: min(k*s.TotalSteps/20, s.TotalSteps), TotalSteps: s.TotalSteps,
				BatchSize: s.InitialBatchSize, Throughput: 100, Elapsed: float64(s.TotalSteps/20) / 100}
			if k == 20 {
				o.Elapsed = 1e9
			}
			if err := f.Observe(s.ID, o); err != nil {
				t.Fatal(err)
			}
		}
		f.Complete(s.ID)
	}
	fc, err := f.Forecast(victim.ID)
	if err != nil {
		t.Fatal(err)
	}
	scale := f.BandScale()
	t.Logf("factor %.3f; victim's band %.4g–%.4g around %.4g (raw %.4g–%.4g)", scale, fc.Remaining.P10, fc.Remaining.P90, fc.Remaining.Mean, raw.Remaining.P10, raw.Remaining.P90)
	if !(scale > 1) || scale > 8 {
		t.Fatalf("the hostile jobs gave a factor of %v, want above 1 and at most 8", scale)
	}
	m := fc.Remaining.Mean
	if p90 := fc.Remaining.P90; math.IsInf(p90, 0) || math.IsNaN(p90) || p90 > m*math.Pow(raw.Remaining.P90/raw.Remaining.Mean, 8)*1.000001 {
		t.Fatalf("the victim's P90 %v is past what a factor of 8 allows (mean %v)", p90, m)
	}
}
