package sim_test

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// The forecasting issue's targets (docs/forecasting.md), measured on the
// four original experiments, deterministic and noisy.

// experiment is one of the original's four experiments.
type experiment struct {
	trace, table, config string
	gpus                 int
}

var experiments = []experiment{
	{"120jobs-32gpus", "tacc", "shockwave-config-tacc_32gpus.json", 32},
	{"220jobs-64gpus", "wisr", "shockwave-config-scale_64gpus.json", 64},
	{"460jobs-128gpus", "wisr", "shockwave-config-scale_128gpus.json", 128},
	{"900jobs-256gpus", "wisr", "shockwave-config-scale_256gpus.json", 256},
}

// noisyWorkload is the noisy workload: switches jittered by up to
// 5 epochs, 10 % per-job and 5 % per-round throughput noise.
var noisyWorkload = workload.Noise{Seed: 1, ScheduleJitter: 5, ThroughputNoise: 0.1, RoundNoise: 0.05}

// variant is how one run differs from the original experiment.
type variant struct {
	policy, info, fairness string
	noise                  workload.Noise
}

var runCache = map[string]*sim.Result{}

// runExperiment simulates one experiment in one variant, once per test
// binary (the targets share runs).
func runExperiment(t *testing.T, e experiment, v variant) *sim.Result {
	t.Helper()
	key := fmt.Sprintf("%s/%+v", e.trace, v)
	if r, ok := runCache[key]; ok {
		return r
	}
	dir := shareddata.Dir(t)
	jobs, err := workload.ReadTraceFile(filepath.Join(dir, "shockwave-traces", e.trace+".trace"))
	if err != nil {
		t.Fatal(err)
	}
	thr, err := workload.Builtin(e.table)
	if err != nil {
		t.Fatal(err)
	}
	var opts policy.Options
	if v.policy == "shockwave" {
		raw, err := os.ReadFile(filepath.Join(dir, e.config))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := policy.ParseShockwaveConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Info, cfg.Fairness = v.info, v.fairness
		opts.Config = cfg
	}
	r, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: e.gpus, Policy: v.policy, Options: opts,
		Forecasts: true, Noise: v.noise})
	if err != nil {
		t.Fatal(err)
	}
	runCache[key] = r
	return r
}

// scales returns the 32-GPU experiment, and the three scale experiments
// too with SHOCKWAVE_LONG=1 (make test-long).
func scales() []experiment {
	if os.Getenv("SHOCKWAVE_LONG") == "" {
		return experiments[:1]
	}
	return experiments
}

var online = variant{policy: "shockwave", info: policy.InfoOnline}

func noisyOf(v variant) variant { v.noise = noisyWorkload; return v }

// TestForecast_BandsHoldTheTruth75To85Percent: the calibrated P10–P90 band
// holds the truth at 75–85 % of all points, on the deterministic and the
// noisy workloads.
func TestForecast_BandsHoldTheTruth75To85Percent(t *testing.T) {
	for _, e := range scales() {
		for _, v := range []variant{online, noisyOf(online)} {
			r := runExperiment(t, e, v)
			used, _ := sim.ForecastErrors(r.Forecasts, 0)
			t.Logf("%s noisy=%v: coverage %.3f over %d points", e.trace, v.noise.Enabled(), used.CoverP1090, used.Points)
			if used.CoverP1090 < 0.75 || used.CoverP1090 > 0.85 {
				t.Errorf("%s noisy=%v: P10–P90 coverage %.3f outside [0.75, 0.85]", e.trace, v.noise.Enabled(), used.CoverP1090)
			}
		}
	}
}

// TestNoisy_OnlineShockwaveBeatsGavelAndThemisAndForecastsWell: on the
// noisy workload online Shockwave has a lower worst ρ than Gavel and
// Themis and a makespan at least 1.25× better (the target), its
// median remaining-time error is at most 3 % and its p90 at most 15 % over
// all points, and for the first job of each recipe at
// 10 % progress its median error is below the profile estimator's.
func TestNoisy_OnlineShockwaveBeatsGavelAndThemisAndForecastsWell(t *testing.T) {
	for _, e := range scales() {
		sw := runExperiment(t, e, noisyOf(online))
		for _, base := range []string{"gavel", "themis"} {
			b := runExperiment(t, e, noisyOf(variant{policy: base}))
			ratio := b.Makespan / sw.Makespan
			t.Logf("%s: %s makespan %.0f vs %.0f (%.3f×), worst ρ %.3f vs %.3f", e.trace, base, b.Makespan, sw.Makespan, ratio, b.WorstFTF, sw.WorstFTF)
			want := knownMisses[e.gpus].noisyMargin
			if want == 0 {
				want = 1.25
			}
			if ratio < want || sw.WorstFTF >= b.WorstFTF {
				t.Errorf("%s: %s margin %.3f× (want ≥ %.2f×), worst ρ %.3f vs %.3f", e.trace, base, ratio, want, sw.WorstFTF, b.WorstFTF)
			}
		}
		used, prof := sim.ForecastErrors(sw.Forecasts, 0)
		t.Logf("%s: online median %.4f p90 %.4f (profile %.4f / %.4f)", e.trace, used.MedianAPE, used.P90APE, prof.MedianAPE, prof.P90APE)
		if used.MedianAPE > 0.03 || used.P90APE > 0.15 {
			t.Errorf("%s: online error median %.4f p90 %.4f (want ≤ 0.03 and ≤ 0.15)", e.trace, used.MedianAPE, used.P90APE)
		}
		checkFirstOfRecipe(t, e.trace+" noisy", sw.Forecasts, true)
	}
}

// checkFirstOfRecipe asserts that at 10 % progress the online median error
// of the first job of each recipe is below the profile estimator's (with
// strict false, it only logs them: see knownMisses).
func checkFirstOfRecipe(t *testing.T, name string, points []sim.ForecastPoint, strict bool) {
	t.Helper()
	for _, s := range sim.ForecastSlices(points) {
		if s.Slice == "first of recipe" && s.Mark == 0.1 {
			t.Logf("%s: first of recipe at 10 %%: online median %.4f p90 %.4f, profile %.4f / %.4f (%d points)",
				name, s.Used.MedianAPE, s.Used.P90APE, s.Profile.MedianAPE, s.Profile.P90APE, s.Used.Points)
			if strict && (s.Used.Points == 0 || s.Used.MedianAPE >= s.Profile.MedianAPE) {
				t.Errorf("%s: first of recipe at 10 %%: online median %.4f not below the profile estimator's %.4f",
					name, s.Used.MedianAPE, s.Profile.MedianAPE)
			}
		}
	}
}

// knownMisses lists, per cluster size, where the measured result misses an
// issue target, and the bound the tests hold it to instead; every entry is
// reported in docs/forecasting.md with its number. A zero field means the
// target itself is asserted.
var knownMisses = map[int]struct {
	noisyMargin   float64 // makespan margin over Gavel and Themis, noisy (target 1.25)
	worstRho      float64 // worst ρ online, deterministic (target 1.5)
	makespan      float64 // makespan over the relaxation's (target 1.02)
	firstOfRecipe bool    // first of recipe at 10 %, deterministic, not below the profile estimator's
}{}

// TestFairness_TightestBoundKeepsWorstRhoAtMost1_5: on the deterministic
// traces online Shockwave with the binding fairness rule has worst ρ ≤ 1.5
// at every scale, and an average JCT and a makespan within 2 % of the
// original's relaxation (except knownMisses).
func TestFairness_TightestBoundKeepsWorstRhoAtMost1_5(t *testing.T) {
	for _, e := range scales() {
		tight := runExperiment(t, e, online)
		relax := runExperiment(t, e, variant{policy: "shockwave", info: policy.InfoOnline, fairness: "relax"})
		t.Logf("%s: tightest makespan %.0f avg JCT %.0f worst ρ %.3f; relax %.0f %.0f %.3f (makespan %+.1f %%, JCT %+.1f %%)",
			e.trace, tight.Makespan, tight.AvgJCT, tight.WorstFTF, relax.Makespan, relax.AvgJCT, relax.WorstFTF,
			100*(tight.Makespan/relax.Makespan-1), 100*(tight.AvgJCT/relax.AvgJCT-1))
		miss := knownMisses[e.gpus]
		rho, mk := cmp.Or(miss.worstRho, 1.5), cmp.Or(miss.makespan, 1.02)
		if tight.WorstFTF > rho || tight.AvgJCT > 1.02*relax.AvgJCT || tight.Makespan > mk*relax.Makespan {
			t.Errorf("%s: worst ρ %.3f (want ≤ %.2f), avg JCT %.0f vs %.0f (want ≤ 1.02×), makespan %.0f vs %.0f (want ≤ %.2f×)",
				e.trace, tight.WorstFTF, rho, tight.AvgJCT, relax.AvgJCT, tight.Makespan, relax.Makespan, mk)
		}
		checkFirstOfRecipe(t, e.trace, tight.Forecasts, !knownMisses[e.gpus].firstOfRecipe)
	}
}
