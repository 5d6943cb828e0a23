package bayes_test

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// BenchmarkDetectorObserve is one posterior update in steady state (the
// run-length posterior saturated at MaxRun = 32 cells, with noise so that
// the cells stay alive).
func BenchmarkDetectorObserve(b *testing.B) {
	d := bayes.NewDetector(bayes.DetectorConfig{})
	rng := rand.New(rand.NewPCG(1, 2))
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = math.Log(100) + 0.03*rng.NormFloat64()
	}
	for _, x := range xs {
		d.Observe(x)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.Observe(xs[i&4095])
	}
}

// BenchmarkForecasterObserve is one Observe call of a running job
// (detector update, peer table, teaching), steady state.
func BenchmarkForecasterObserve(b *testing.B) {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	s := lmSpec("a")
	s.TotalSteps = 5968 * 90000
	if err := f.Admit(s); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	thr := make([]float64, 4096)
	for i := range thr {
		thr[i] = 100 * (1 + 0.03*rng.NormFloat64())
	}
	o := bayes.Observation{TotalSteps: s.TotalSteps, BatchSize: 10, Elapsed: 120}
	for i := range 1000 {
		o.StepsDone += 1000
		o.Throughput = thr[i&4095]
		_ = f.Observe("a", o)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o.StepsDone += 10
		o.Throughput = thr[i&4095]
		if err := f.Observe("a", o); err != nil {
			b.Fatal(err)
		}
	}
}

// forecastFixture is a forecaster whose families learned from completed
// accordion and gns jobs of E = 300 epochs, and a running job of the same
// recipe at epoch 12.
func forecastFixture(b *testing.B, mode workload.Mode) (*bayes.Forecaster, string) {
	thr, err := workload.Builtin("tacc")
	if err != nil {
		b.Fatal(err)
	}
	sp := workload.Spec{JobType: "ResNet-50 (batch size 32)", Model: "ResNet-50", BatchSize: 32,
		TotalSteps: 3125 * 300, ScaleFactor: 4, Mode: mode}
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	rng := rand.New(rand.NewPCG(5, 5))
	feed := func(id string, stop int) {
		rj, ok := trajectory(sp, thr, rng)
		if !ok {
			b.Fatal("no trajectory")
		}
		if err := f.Admit(bayes.JobSpec{ID: id, Model: sp.Model, Mode: string(mode), Workers: 4, InitialBatchSize: 32,
			DatasetSize: 100000, TotalSteps: sp.TotalSteps}); err != nil {
			b.Fatal(err)
		}
		for _, r := range rj.rounds {
			for _, o := range r.obs {
				_ = f.Observe(id, o)
			}
			if r.epoch >= stop {
				return
			}
		}
		f.Complete(id)
	}
	for i := range 5 {
		feed("done"+strconv.Itoa(i), 1<<30)
	}
	feed("x", 12)
	return f, "x"
}

// BenchmarkForecast is one forecast of an E = 300 job with learned family
// priors (accordion: the regime alternates every 10–20 epochs).
func BenchmarkForecast(b *testing.B) {
	for _, mode := range []workload.Mode{workload.Accordion, workload.GNS} {
		b.Run(string(mode), func(b *testing.B) {
			f, id := forecastFixture(b, mode)
			fc, err := f.Forecast(id)
			if err != nil {
				b.Fatal(err)
			}
			b.Logf("%s: %+v", mode, fc)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := f.Forecast(id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
