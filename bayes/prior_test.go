package bayes_test

import (
	"math"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
)

// TestForecaster_FirstMeasurementSetsTheLevelWhateverTheUnit: a job that
// declared no throughput is forecast from its first measurement alone, with
// no pull toward the detector prior's arbitrary centre (log 1 step/s): a
// static job measured once at 10 % of its steps is forecast to need its
// remaining steps at the measured rate, within 0.5 %, whether it runs at
// 0.05, 40 or 4000 steps/s. (With the prior left at log 1 step/s, the
// forecast at 40 steps/s was 11 % too long: the first-of-recipe error of
// docs/forecasting.md.)
func TestForecaster_FirstMeasurementSetsTheLevelWhateverTheUnit(t *testing.T) {
	for _, thr := range []float64{0.05, 40, 4000} {
		f := bayes.NewForecaster(bayes.ForecastConfig{})
		spec := lmSpec("a")
		spec.Throughput = 0
		if err := f.Admit(spec); err != nil {
			t.Fatal(err)
		}
		done := spec.TotalSteps / 10
		o := bayes.Observation{StepsDone: done, TotalSteps: spec.TotalSteps, BatchSize: spec.InitialBatchSize,
			Throughput: thr, Elapsed: float64(done) / thr}
		if err := f.Observe("a", o); err != nil {
			t.Fatal(err)
		}
		fc, err := f.Forecast("a")
		if err != nil {
			t.Fatal(err)
		}
		want := float64(spec.TotalSteps-done) / thr
		if rel := fc.Remaining.Mean/want - 1; math.Abs(rel) > 0.005 {
			t.Errorf("%g steps/s: forecast %.4g s, want %.4g s (%+.1f %%)", thr, fc.Remaining.Mean, want, 100*rel)
		}
	}
}
