package bayes_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
)

// feed gives job i of a synthetic mix one observation at step k: gns jobs
// double their batch size every few epochs, all report noisy throughput;
// every fifth job completes at step 30 and teaches the family priors.
func feed(t *testing.T, f *bayes.Forecaster, rng *rand.Rand, k int) {
	t.Helper()
	for i := range 12 {
		id := fmt.Sprintf("j%d", i)
		if k == 0 {
			s := lmSpec(id)
			s.Mode = []string{"static", "gns", "accordion"}[i%3]
			s.Model = []string{"LM", "ResNet"}[i%2]
			if err := f.Admit(s); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if i%5 == 0 && k == 30 {
			f.Complete(id)
			continue
		}
		if i%5 == 0 && k > 30 {
			continue
		}
		bs := 10
		if i%3 == 1 && k > 10 {
			bs = 20
		}
		steps := int64(k * 900 * 10 / bs)
		o := bayes.Observation{StepsDone: steps, TotalSteps: 5968 * 20 * 10 / int64(bs), BatchSize: bs,
			Throughput: 100 * float64(bs) / 10 * (0.95 + 0.1*rng.Float64()), Elapsed: 90}
		if err := f.Observe(id, o); err != nil {
			t.Fatal(err)
		}
	}
}

func TestState_ARestoredForecasterForecastsBitForBitLikeTheOriginal(t *testing.T) {
	orig := bayes.NewForecaster(bayes.ForecastConfig{})
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range 25 {
		feed(t, orig, rng, k)
	}
	saved := orig.MarshalState()
	restored := bayes.NewForecaster(bayes.ForecastConfig{})
	if err := restored.UnmarshalState(saved); err != nil {
		t.Fatal(err)
	}
	if again := restored.MarshalState(); !bytes.Equal(again, saved) {
		t.Fatal("the state does not survive a round trip byte for byte")
	}
	seed := rng.Uint64()
	r1, r2 := rand.New(rand.NewPCG(seed, 3)), rand.New(rand.NewPCG(seed, 3))
	for k := 25; k < 50; k++ {
		feed(t, orig, r1, k)
		feed(t, restored, r2, k)
		for i := range 12 {
			id := fmt.Sprintf("j%d", i)
			a, errA := orig.Forecast(id)
			b, errB := restored.Forecast(id)
			if fmt.Sprint(errA) != fmt.Sprint(errB) || a != b {
				t.Fatalf("step %d, job %s: original %+v (%v), restored %+v (%v)", k, id, a, errA, b, errB)
			}
		}
	}
	if !bytes.Equal(orig.MarshalState(), restored.MarshalState()) {
		t.Error("the states differ after 25 more steps")
	}
}

func TestState_MalformedStateIsRefused(t *testing.T) {
	f := bayes.NewForecaster(bayes.ForecastConfig{})
	rng := rand.New(rand.NewPCG(5, 6))
	for k := range 5 {
		feed(t, f, rng, k)
	}
	saved := f.MarshalState()
	for _, b := range [][]byte{nil, saved[:len(saved)/2], append(bytes.Clone(saved), 0), {1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 127}} {
		if err := bayes.NewForecaster(bayes.ForecastConfig{}).UnmarshalState(b); err == nil {
			t.Errorf("state of %d bytes accepted", len(b))
		}
	}
}
