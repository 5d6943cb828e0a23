package bayes_test

import (
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
