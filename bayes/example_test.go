package bayes_test

import (
	"fmt"
	"math"

	"github.com/shockwave-sched/shockwave/bayes"
)

// A throughput stream that drops by a third at observation 20 (another job
// moved onto the node): the detector flags the change at once.
func ExampleDetector() {
	d := bayes.NewDetector(bayes.DetectorConfig{})
	for i := range 30 {
		thr := 100.0
		if i >= 20 {
			thr = 66
		}
		thr *= 1 + 0.01*math.Sin(float64(i)) // a little measurement noise
		if p := d.Observe(math.Log(thr)); p > 0.5 && i == 20 {
			fmt.Printf("change detected at observation %d (p=%.2f)\n", i, p)
		}
	}
	fmt.Printf("current throughput ≈ %.0f steps/s\n", math.Exp(d.Mean()))
	// Output:
	// change detected at observation 20 (p=1.00)
	// current throughput ≈ 66 steps/s
}

// A static job with a declared throughput, half done.
func ExampleForecaster() {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	_ = f.Admit(bayes.JobSpec{ID: "j1", Model: "ResNet-18", Mode: "static", Workers: 1,
		InitialBatchSize: 128, DatasetSize: 50000, TotalSteps: 391 * 10, Throughput: 11.7})
	_ = f.Observe("j1", bayes.Observation{StepsDone: 391 * 5, TotalSteps: 391 * 10, Epoch: 5,
		BatchSize: 128, Throughput: 11.7, Elapsed: 167})
	fc, _ := f.Forecast("j1")
	fmt.Printf("remaining %.0f s, epoch %d of %d, family %s\n", fc.Remaining.Mean, fc.Epoch, fc.Epochs, fc.Family)
	fin := fc.Remaining.FinishUnderShare(1000, 0.25)
	fmt.Printf("finish under a quarter share ≈ %.0f s\n", fin.Mean)
	// Output:
	// remaining 167 s, epoch 5 of 10, family weak
	// finish under a quarter share ≈ 1669 s
}
