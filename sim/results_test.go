package sim_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// runOriginal simulates one of the original experiments (trace, throughput
// table, cluster size and, for Shockwave, the original configuration file
// in profile mode, like the original) in the default mode.
func runOriginal(t *testing.T, trace, table string, gpus int, pol, config string) *sim.Result {
	return runOriginalInfo(t, trace, table, gpus, pol, config, policy.InfoProfile)
}

func runOriginalInfo(t *testing.T, trace, table string, gpus int, pol, config, info string) *sim.Result {
	t.Helper()
	dir := shareddata.Dir(t)
	jobs, err := workload.ReadTraceFile(filepath.Join(dir, "shockwave-traces", trace+".trace"))
	if err != nil {
		t.Fatal(err)
	}
	thr, err := workload.Builtin(table)
	if err != nil {
		t.Fatal(err)
	}
	var opts policy.Options
	if pol == "shockwave" {
		raw, err := os.ReadFile(filepath.Join(dir, config))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := policy.ParseShockwaveConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Info = info
		opts.Config = cfg
	}
	res, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: gpus, Policy: pol, Options: opts, Forecasts: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// scaleExperiments are the original's three scale experiments (wisr
// throughputs, one configuration file per cluster size).
var scaleExperiments = []struct {
	trace string
	gpus  int
}{{"220jobs-64gpus", 64}, {"460jobs-128gpus", 128}, {"900jobs-256gpus", 256}}

// TestShockwave_MatchesOrBeatsReleasedRunOnEveryMetric is the market issue's
// first result: on the 120-job, 32-GPU experiment our Shockwave is at least
// as good as the authors' released run (spec §7.2, Gurobi with a 15 s limit
// per solve) on makespan, average JCT, worst ρ and the unfair fraction at
// once.
func TestShockwave_MatchesOrBeatsReleasedRunOnEveryMetric(t *testing.T) {
	want := loadReleased(t, "shockwave")
	unfair := 0
	for _, f := range want.FTF {
		if f > 1.05 {
			unfair++
		}
	}
	wantUnfair := 100 * float64(unfair) / float64(len(want.FTF))
	r := runOriginal(t, "120jobs-32gpus", "tacc", 32, "shockwave", "shockwave-config-tacc_32gpus.json")
	t.Logf("ours: makespan %.1f s, avg JCT %.1f s, worst ρ %.3f, unfair %.2f %%", r.Makespan, r.AvgJCT, r.WorstFTF, r.UnfairPct105)
	t.Logf("released: makespan %.1f s, avg JCT %.1f s, worst ρ %.3f, unfair %.2f %%", want.Makespan, want.AvgJCT, maxOf(want.FTF), wantUnfair)
	if r.Makespan > want.Makespan || r.AvgJCT > want.AvgJCT || r.WorstFTF > maxOf(want.FTF) || r.UnfairPct105 > wantUnfair {
		t.Errorf("not at least as good as the released run on every metric")
	}
}

// TestShockwave_ScaleMarginsOverGavelAndThemis is the market issue's second
// result: on the 220/64, 460/128 and 900/256 experiments Shockwave's
// makespan is at least 1.25× better than Gavel's and Themis's, with a worst
// ρ below both. The 64-GPU experiment runs in every `make test` (about 4 s
// on two cores); the 128- and 256-GPU ones (about 20 s) when
// SHOCKWAVE_LONG=1 (`make test-long`).
func TestShockwave_ScaleMarginsOverGavelAndThemis(t *testing.T) {
	exps := scaleExperiments
	if os.Getenv("SHOCKWAVE_LONG") == "" {
		exps = exps[:1]
	}
	for _, c := range exps {
		t.Run(c.trace, func(t *testing.T) {
			config := fmt.Sprintf("shockwave-config-scale_%dgpus.json", c.gpus)
			sw := runOriginal(t, c.trace, "wisr", c.gpus, "shockwave", config)
			for _, base := range []string{"gavel", "themis"} {
				b := runOriginal(t, c.trace, "wisr", c.gpus, base, "")
				ratio := b.Makespan / sw.Makespan
				t.Logf("%s: makespan %.1f vs %.1f (%.3f×), worst ρ %.3f vs %.3f", base, b.Makespan, sw.Makespan, ratio, b.WorstFTF, sw.WorstFTF)
				if ratio < 1.25 || sw.WorstFTF >= b.WorstFTF {
					t.Errorf("%s: margin %.3f× (want ≥ 1.25×), worst ρ %.3f vs %.3f", base, ratio, sw.WorstFTF, b.WorstFTF)
				}
			}
		})
	}
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs[1:] {
		m = max(m, x)
	}
	return m
}
