package bayes_test

import (
	"fmt"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
)

// TestForecast_NoGrowthPastTheModelsLargestBatchSize teaches a forecaster
// with ten accordion jobs of one model that grow from 5 to 80 at epoch 10,
// then asks about a job of that model that starts at 80: it must not be
// forecast to grow (before the bound, coarse families extrapolated 16×).
func TestForecast_NoGrowthPastTheModelsLargestBatchSize(t *testing.T) {
	f := bayes.NewForecaster(bayes.DefaultForecastConfig())
	const dataset = 1000
	for k := range 10 {
		id := fmt.Sprint("peer", k)
		if err := f.Admit(bayes.JobSpec{ID: id, Model: "LM", Mode: "accordion", Workers: 1,
			InitialBatchSize: 5, DatasetSize: dataset, TotalSteps: 40 * 200}); err != nil {
			t.Fatal(err)
		}
		for e := 1; e <= 40; e++ {
			bs, ipe := 5, int64(200)
			if e > 10 {
				bs, ipe = 80, 13
			}
			total := int64(40 * 200)
			steps := int64(e) * ipe
			if bs == 80 {
				total = 40 * 13
			}
			if err := f.Observe(id, bayes.Observation{StepsDone: steps, TotalSteps: total, Epoch: e, BatchSize: bs,
				Throughput: 10 * float64(bs) / 5, Elapsed: 20}); err != nil {
				t.Fatal(err)
			}
		}
		f.Complete(id)
	}
	if err := f.Admit(bayes.JobSpec{ID: "top", Model: "LM", Mode: "accordion", Workers: 1,
		InitialBatchSize: 80, DatasetSize: dataset, TotalSteps: 40 * 13}); err != nil {
		t.Fatal(err)
	}
	for e := 1; e <= 5; e++ {
		if err := f.Observe("top", bayes.Observation{StepsDone: int64(e) * 13, TotalSteps: 40 * 13, Epoch: e, BatchSize: 80, Throughput: 160, Elapsed: 13.0 / 160}); err != nil {
			t.Fatal(err)
		}
	}
	fc, err := f.Forecast("top")
	if err != nil {
		t.Fatal(err)
	}
	if fc.NextBatchSize != 80 || fc.NextProb != 0 {
		t.Fatalf("forecast growth to %d with probability %.3g for a job at the model's largest batch size", fc.NextBatchSize, fc.NextProb)
	}
	want := 35 * 13 / 160.0 // 35 epochs of 13 steps at 160 steps/s
	if d := fc.Remaining.Mean/want - 1; d > 0.1 || d < -0.1 {
		t.Fatalf("remaining %.3f s, want about %.3f s", fc.Remaining.Mean, want)
	}
}
