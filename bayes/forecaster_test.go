package bayes_test

import (
	"bytes"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

func lmSpec(id string) bayes.JobSpec {
	return bayes.JobSpec{ID: id, Model: "LM", Mode: "static", Workers: 1, InitialBatchSize: 10,
		DatasetSize: 59675, TotalSteps: 5968 * 20, Throughput: 100}
}

func TestForecaster_RejectsBadInputWithoutStateChange(t *testing.T) {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	good := lmSpec("a")
	for _, c := range []struct {
		mut  func(*bayes.JobSpec)
		want string
	}{
		{func(s *bayes.JobSpec) { s.ID = "" }, "empty id"},
		{func(s *bayes.JobSpec) { s.Model = "" }, "empty model"},
		{func(s *bayes.JobSpec) { s.Workers = 0 }, "workers"},
		{func(s *bayes.JobSpec) { s.InitialBatchSize = -1 }, "initial batch size"},
		{func(s *bayes.JobSpec) { s.DatasetSize = -5 }, "dataset size"},
		{func(s *bayes.JobSpec) { s.TotalSteps = 0 }, "total steps"},
		{func(s *bayes.JobSpec) { s.Throughput = math.NaN() }, "throughput"},
		{func(s *bayes.JobSpec) { s.TotalSteps = 1 << 40 }, "epochs"},
	} {
		s := good
		c.mut(&s)
		err := f.Admit(s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Admit(%+v) = %v, want an error naming %q", s, err, c.want)
		}
	}
	if f.Len() != 0 {
		t.Fatalf("rejected specs were admitted")
	}
	if err := f.Admit(good); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(good); err == nil {
		t.Errorf("duplicate admitted")
	}
	before, _ := f.Forecast("a")
	for _, c := range []struct {
		o    bayes.Observation
		want string
	}{
		{bayes.Observation{StepsDone: -1, TotalSteps: 10, BatchSize: 10}, "steps done"},
		{bayes.Observation{TotalSteps: 0, BatchSize: 10}, "total steps"},
		{bayes.Observation{TotalSteps: 10, BatchSize: 0}, "batch size"},
		{bayes.Observation{TotalSteps: 10, BatchSize: 10, Epoch: -2}, "epoch"},
		{bayes.Observation{TotalSteps: 10, BatchSize: 10, Throughput: math.Inf(1)}, "throughput"},
		{bayes.Observation{TotalSteps: 10, BatchSize: 10, Elapsed: math.NaN()}, "elapsed"},
	} {
		if err := f.Observe("a", c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Observe(%+v) = %v, want an error naming %q", c.o, err, c.want)
		}
	}
	if err := f.Observe("nope", bayes.Observation{TotalSteps: 1, BatchSize: 1}); err == nil {
		t.Errorf("unknown job accepted")
	}
	after, _ := f.Forecast("a")
	if before != after {
		t.Errorf("rejected observations changed the forecast: %+v → %+v", before, after)
	}
	if _, err := f.Forecast("nope"); err == nil {
		t.Errorf("forecast of an unknown job")
	}
	if err := bayes.ValidateForecastConfig(bayes.ForecastConfig{WeakHazard: 2}); err == nil {
		t.Errorf("weak hazard 2 accepted")
	}
}

// TestForecast_StaticJobIsExact: a static job with a declared throughput
// forecasts exactly its remaining steps over its throughput, before and
// while it runs; P10 ≤ mean ≤ P90.
func TestForecast_StaticJobIsExact(t *testing.T) {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	s := lmSpec("a")
	if err := f.Admit(s); err != nil {
		t.Fatal(err)
	}
	fc, _ := f.Forecast("a")
	want := float64(s.TotalSteps) / 100
	if !close(fc.Remaining.Mean, want, 0.01) || fc.Uninformed || fc.Epochs != 20 || fc.BatchSize != 10 {
		t.Errorf("before running: %+v, want mean %g", fc, want)
	}
	done := int64(0)
	for done < s.TotalSteps/2 {
		done += 12000
		if err := f.Observe("a", bayes.Observation{StepsDone: done, TotalSteps: s.TotalSteps, BatchSize: 10, Throughput: 100, Elapsed: 120}); err != nil {
			t.Fatal(err)
		}
	}
	fc, _ = f.Forecast("a")
	want = float64(s.TotalSteps-done) / 100
	if !close(fc.Remaining.Mean, want, 1e-3) {
		t.Errorf("mid-run mean %g, want %g", fc.Remaining.Mean, want)
	}
	if fc.Remaining.P10 > fc.Remaining.Mean || fc.Remaining.P90 < fc.Remaining.Mean {
		t.Errorf("quantiles out of order: %+v", fc.Remaining)
	}
	if !close(fc.EpochSeconds, 5968.0/100, 1e-3) || fc.Epoch != int(done/5968) || fc.NextProb != 0 {
		t.Errorf("forecast %+v", fc)
	}
	fin := fc.Remaining.FinishUnderShare(1000, 0.5)
	if !close(fin.Mean, 1000+2*fc.Remaining.Mean, 1e-12) || fin.P10 > fin.Mean || fin.P90 < fin.Mean {
		t.Errorf("finish under share: %+v", fin)
	}
	if inf := fc.Remaining.FinishUnderShare(0, 0); !math.IsInf(inf.Mean, 1) {
		t.Errorf("share 0 gives %+v", inf)
	}
}

// TestForecast_UninformedJobIsFlagged: no declared throughput, no peers.
func TestForecast_UninformedJobIsFlagged(t *testing.T) {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	s := lmSpec("a")
	s.Throughput = 0
	if err := f.Admit(s); err != nil {
		t.Fatal(err)
	}
	fc, _ := f.Forecast("a")
	if !fc.Uninformed || !(fc.Remaining.Mean > 0) || !(fc.Remaining.P90 > 2*fc.Remaining.P10) || fc.Family != "weak" {
		t.Errorf("uninformed forecast %+v", fc)
	}
	// A peer that ran at the same (model, bs, workers) informs it.
	p := lmSpec("b")
	p.Throughput = 0
	_ = f.Admit(p)
	_ = f.Observe("b", bayes.Observation{StepsDone: 1000, TotalSteps: p.TotalSteps, BatchSize: 10, Throughput: 80, Elapsed: 12.5})
	fc, _ = f.Forecast("a")
	if fc.Uninformed || !close(fc.Remaining.Mean, float64(s.TotalSteps)/80, 0.01) {
		t.Errorf("peer-informed forecast %+v, want mean %g", fc, float64(s.TotalSteps)/80)
	}
}

// TestForecast_RecipeTeachesSchedule: after one gns job of a recipe has
// run, the next job of that recipe forecasts its doubling before it
// happens, with the right batch size, epoch and throughput.
func TestForecast_RecipeTeachesSchedule(t *testing.T) {
	thr, err := workload.Builtin("tacc")
	if err != nil {
		t.Fatal(err)
	}
	sp := workload.Spec{ID: 0, JobType: "ResNet-18 (batch size 128)", Model: "ResNet-18", BatchSize: 128,
		TotalSteps: 391 * 40, ScaleFactor: 1, Mode: workload.GNS}
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	run := func(id string, stopAtEpoch int) (truthAt func() float64) {
		rj, ok := trajectory(sp, thr, nil)
		if !ok {
			t.Fatal("no trajectory")
		}
		if err := f.Admit(bayes.JobSpec{ID: id, Model: sp.Model, Mode: "gns", Workers: 1, InitialBatchSize: 128,
			DatasetSize: 50000, TotalSteps: sp.TotalSteps}); err != nil {
			t.Fatal(err)
		}
		for _, r := range rj.rounds {
			for _, o := range r.obs {
				if err := f.Observe(id, o); err != nil {
					t.Fatal(err)
				}
			}
			if r.epoch >= stopAtEpoch {
				return func() float64 { return rj.total - r.elapsed }
			}
		}
		return func() float64 { return 0 }
	}
	run("teacher", 1<<30)
	f.Complete("teacher")
	truth := run("student", 5)()
	fc, _ := f.Forecast("student")
	t.Logf("student at epoch %d: forecast %+v, truth %.1f s", fc.Epoch, fc, truth)
	if fc.Family != "recipe" || fc.NextBatchSize != 256 || fc.NextProb < 0.6 {
		t.Errorf("student forecast %+v: want the recipe's doubling to 256", fc)
	}
	if ape(fc.Remaining.Mean, truth) > 0.05 {
		t.Errorf("remaining %g vs truth %g", fc.Remaining.Mean, truth)
	}
}

// TestReplay_SeededRunIsBitForBitReproducible replays a generated workload
// twice with the same seed and compares every forecast bit for bit.
func TestReplay_SeededRunIsBitForBitReproducible(t *testing.T) {
	thr, _ := workload.Builtin("wisr")
	specs, err := workload.Generate(120, 42, thr, workload.GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	collect := func() []bayes.Forecast {
		var out []bayes.Forecast
		replay(specs, thr, replayOptions{seed: 9, onForecast: func(s scored) { out = append(out, s.online) }})
		return out
	}
	a, b := collect(), collect()
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d vs %d forecasts", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if math.Float64bits(x.Remaining.Mean) != math.Float64bits(y.Remaining.Mean) ||
			math.Float64bits(x.Remaining.P10) != math.Float64bits(y.Remaining.P10) ||
			math.Float64bits(x.Remaining.P90) != math.Float64bits(y.Remaining.P90) || x != y {
			t.Fatalf("forecast %d differs: %+v vs %+v", i, x, y)
		}
	}
}

// TestForecast_IntervalsCoverTruth: on a generated workload the calibrated
// [P10, P90] interval of Remaining holds the truth for 75–85 % of the
// forecasts (nominally 80 %, calibrate.go).
func TestForecast_IntervalsCoverTruth(t *testing.T) {
	thr, _ := workload.Builtin("tacc")
	specs, _ := workload.Generate(300, 3, thr, workload.GenerateOptions{})
	in, n := 0, 0
	for _, s := range replay(specs, thr, replayOptions{seed: 3}) {
		n++
		if s.truth >= s.online.Remaining.P10 && s.truth <= s.online.Remaining.P90 {
			in++
		}
	}
	cov := float64(in) / float64(n)
	t.Logf("P10–P90 coverage %.1f%% of %d forecasts", 100*cov, n)
	if cov < 0.75 || cov > 0.85 {
		t.Errorf("coverage %.3f outside the calibrated range [0.75, 0.85]", cov)
	}
}

// TestForecaster_MemoryPerJobIsBounded feeds 10,000 observations to each
// of 50 jobs and reports the retained heap per job; it must not grow with
// the observation count.
func TestForecaster_MemoryPerJobIsBounded(t *testing.T) {
	perJob := func(obs int) float64 {
		const jobs = 50
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		f := bayes.NewForecaster(bayes.ForecastConfig{})
		for i := range jobs {
			s := lmSpec(strconv.Itoa(i))
			s.TotalSteps = 1 << 30 / 64
			if err := f.Admit(s); err != nil {
				t.Fatal(err)
			}
			for k := 1; k <= obs; k++ {
				_ = f.Observe(s.ID, bayes.Observation{StepsDone: int64(k) * 100, TotalSteps: s.TotalSteps,
					BatchSize: 10, Throughput: 100 + float64(k%7), Elapsed: 1})
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		runtime.KeepAlive(f)
		return float64(m1.HeapAlloc-m0.HeapAlloc) / jobs
	}
	small, large := perJob(100), perJob(10000)
	t.Logf("retained bytes per job: %.0f after 100 observations, %.0f after 10,000", small, large)
	if large > 64<<10 || large > 2*small+4096 {
		t.Errorf("bytes per job %.0f after 10,000 observations (%.0f after 100): not bounded", large, small)
	}
}

// TestForecaster_ReserveChangesNothing: a forecaster that made room for
// its admissions first (as the first round of a large cluster does) saves
// the same state and forecasts the same as one that grew as it admitted,
// and a reservation smaller than what it holds, or of nothing, is a
// no-op.
func TestForecaster_ReserveChangesNothing(t *testing.T) {
	grown, reserved := bayes.NewForecaster(bayes.DefaultForecastConfig()), bayes.NewForecaster(bayes.DefaultForecastConfig())
	reserved.Reserve(0)
	reserved.Reserve(40)
	for i := range 60 {
		if i == 30 {
			reserved.Reserve(5) // fewer than it holds
		}
		sp := lmSpec("job-" + strconv.Itoa(i))
		sp.Workers = 1 + i%3
		for _, f := range []*bayes.Forecaster{grown, reserved} {
			if err := f.Admit(sp); err != nil {
				t.Fatal(err)
			}
			if err := f.Observe(sp.ID, bayes.Observation{StepsDone: 5968, TotalSteps: sp.TotalSteps, Epoch: 1, BatchSize: 10, Throughput: 90 + float64(i), Elapsed: 60}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(grown.MarshalState(), reserved.MarshalState()) {
		t.Fatal("the reserved forecaster's state differs")
	}
	for i := range 60 {
		id := "job-" + strconv.Itoa(i)
		a, errA := grown.Forecast(id)
		b, errB := reserved.Forecast(id)
		if a != b || errA != nil || errB != nil {
			t.Fatalf("%s: %+v (%v) and %+v (%v)", id, a, errA, b, errB)
		}
	}
}
