package bayes

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestForecast_PristineJobsSharingAForecastGetTheirOwnBits: on a workload
// of a few job shapes (model, mode, width, batch size, size), many jobs
// each, where jobs are admitted, report progress (some change batch size),
// complete and leave in random order (a third of the reports progress
// alone, which bumps the memo's version only where it reaches what other
// jobs' forecasts read: the model's batch sizes, a regime change, the
// families), every Forecast equals the forecast
// computed for the job alone (forecastRaw and the band's calibration), bit
// for bit, after every call; and the memo does serve forecasts (jobs of
// one shape that reported nothing share one).
func TestForecast_PristineJobsSharingAForecastGetTheirOwnBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 10000))
	f := NewForecaster(DefaultForecastConfig())
	type shape struct {
		model, mode string
		w, bs, data int
		total       int64
		thr         float64
	}
	shapes := []shape{
		{"ResNet-18", "", 1, 32, 50000, 100_000, 0},
		{"ResNet-18", "", 2, 32, 50000, 100_000, 0},
		{"ResNet-18", "gns", 1, 32, 50000, 60_000, 0},
		{"LM", "accordion", 4, 16, 20000, 40_000, 12},
		{"LM", "static", 1, 64, 20000, 8_000, 0},
	}
	var live []string
	steps := map[string]int64{}
	bs := map[string]int{}
	shared, forecasts := 0, 0
	unbumped := 0 // Observe calls that changed nothing other jobs' forecasts read
	for call := range 1500 {
		switch op := rng.IntN(10); {
		case op < 3 || len(live) < 5:
			s := shapes[rng.IntN(len(shapes))]
			id := fmt.Sprintf("j%d", call)
			if err := f.Admit(JobSpec{ID: id, Model: s.model, Mode: s.mode, Workers: s.w, InitialBatchSize: s.bs,
				DatasetSize: s.data, TotalSteps: s.total, Throughput: s.thr}); err != nil {
				t.Fatal(err)
			}
			live, bs[id] = append(live, id), s.bs
		case op < 8:
			id := live[rng.IntN(len(live))]
			j := f.jobs[id]
			if rng.IntN(8) == 0 {
				bs[id] *= 2
			}
			steps[id] += int64(rng.IntN(3000))
			o := Observation{StepsDone: min(steps[id], j.total), TotalSteps: j.total, BatchSize: bs[id], Elapsed: 10,
				Throughput: 50 * math.Exp(0.1*rng.NormFloat64())}
			if rng.IntN(3) == 0 { // progress alone (a job's first report, a failed lease)
				o.Throughput = 0
				if rng.IntN(2) == 0 {
					o.StepsDone, o.Elapsed = j.steps, 0
				}
			}
			ver := f.ver
			if err := f.Observe(id, o); err != nil {
				t.Fatal(err)
			}
			if f.ver == ver {
				unbumped++
			}
		default:
			k := rng.IntN(len(live))
			if rng.IntN(2) == 0 {
				f.Complete(live[k])
			} else {
				f.Remove(live[k])
			}
			live = append(live[:k], live[k+1:]...)
		}
		for _, id := range live {
			got, err := f.Forecast(id)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := f.forecastRaw(f.jobs[id])
			want.Remaining = f.cal.calibrate(want.Remaining)
			if got != want {
				t.Fatalf("call %d, job %s: forecast %+v, alone %+v", call, id, got, want)
			}
			forecasts++
			if _, ok := pristine(f.jobs[id]); ok {
				shared++
			}
		}
	}
	if unbumped < 50 {
		t.Fatalf("only %d Observe calls kept the memo's version: the shared-state test is not exercised", unbumped)
	}
	if len(f.memo.m) == 0 || shared < forecasts/10 {
		t.Fatalf("the memo served little: %d of %d forecasts were of pristine jobs, %d shapes remembered", shared, forecasts, len(f.memo.m))
	}
	t.Logf("%d forecasts, %d of pristine jobs; %d of the Observe calls kept the version", forecasts, shared, unbumped)
}
