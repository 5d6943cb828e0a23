package sim_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/sim"
)

// runInfo simulates Shockwave on one original experiment in the given
// information mode, sampling its forecasts.
func runInfo(t *testing.T, trace, table string, gpus int, config, info string) *sim.Result {
	t.Helper()
	return runOriginalInfo(t, trace, table, gpus, "shockwave", config, info)
}

// checkOnline asserts the forecast issue's results on one experiment:
// online forecasts at least as accurate as the profile estimator (median
// APE at every mark and overall), and online scheduling within 3 % of
// profile scheduling on makespan and average JCT and 10 % on worst ρ.
func checkOnline(t *testing.T, trace, table string, gpus int, config string) {
	on := runInfo(t, trace, table, gpus, config, policy.InfoOnline)
	prof := runInfo(t, trace, table, gpus, config, policy.InfoProfile)
	for _, mark := range append(sim.ForecastMarks, 0) {
		used, profile := sim.ForecastErrors(on.Forecasts, mark)
		t.Logf("mark %.2f: online median APE %.4f (p90 %.4f, %d points), profile %.4f (p90 %.4f)",
			mark, used.MedianAPE, used.P90APE, used.Points, profile.MedianAPE, profile.P90APE)
		if used.Points == 0 || profile.Points == 0 || used.MedianAPE > profile.MedianAPE {
			t.Errorf("mark %.2f: online median APE %.4f above the profile estimator's %.4f", mark, used.MedianAPE, profile.MedianAPE)
		}
	}
	t.Logf("online: makespan %.1f avg JCT %.1f worst ρ %.3f; profile: %.1f %.1f %.3f",
		on.Makespan, on.AvgJCT, on.WorstFTF, prof.Makespan, prof.AvgJCT, prof.WorstFTF)
	if on.Makespan > 1.03*prof.Makespan || on.AvgJCT > 1.03*prof.AvgJCT || on.WorstFTF > 1.10*prof.WorstFTF {
		t.Errorf("online mode not within 3 %% / 3 %% / 10 %% of profile mode")
	}
}

// TestOnline_MatchesProfileOn120Jobs checks the forecast issue's results on
// the 120-job, 32-GPU experiment (about 3 s).
func TestOnline_MatchesProfileOn120Jobs(t *testing.T) {
	checkOnline(t, "120jobs-32gpus", "tacc", 32, "shockwave-config-tacc_32gpus.json")
}

// TestOnline_MatchesProfileAtScale checks them on the three scale
// experiments, and that online Shockwave keeps the market issue's margins
// over Gavel and Themis. About a minute on two cores: SHOCKWAVE_LONG=1.
func TestOnline_MatchesProfileAtScale(t *testing.T) {
	if os.Getenv("SHOCKWAVE_LONG") == "" {
		t.Skip("long trace replay; set SHOCKWAVE_LONG=1 to run it")
	}
	for _, c := range scaleExperiments {
		t.Run(c.trace, func(t *testing.T) {
			config := fmt.Sprintf("shockwave-config-scale_%dgpus.json", c.gpus)
			checkOnline(t, c.trace, "wisr", c.gpus, config)
			on := runInfo(t, c.trace, "wisr", c.gpus, config, policy.InfoOnline)
			for _, base := range []string{"gavel", "themis"} {
				b := runOriginal(t, c.trace, "wisr", c.gpus, base, "")
				if ratio := b.Makespan / on.Makespan; ratio < 1.25 || on.WorstFTF >= b.WorstFTF {
					t.Errorf("%s: online margin %.3f× (want ≥ 1.25×), worst ρ %.3f vs %.3f", base, ratio, on.WorstFTF, b.WorstFTF)
				}
			}
		})
	}
}

// TestOnline_SeededRunIsBitForBit runs online Shockwave twice on a
// generated trace and compares the results, forecasts included, byte for
// byte.
func TestOnline_SeededRunIsBitForBit(t *testing.T) {
	jobs, thr := generated(t, 60, 11)
	out := func() []byte {
		r, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 16, Policy: "shockwave", Forecasts: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Forecasts) == 0 {
			t.Fatal("no forecasts sampled")
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if a, b := out(), out(); !bytes.Equal(a, b) {
		t.Fatal("two seeded online runs differ")
	}
}

// TestOnline_PlanExplainsRegimeAndForecast checks the coordinator
// diagnostics of online mode: every plan explanation of an active job
// names its batch-size regime, its change probability, its forecast with
// a P10–P90 band around it and the prior level behind it.
func TestOnline_PlanExplainsRegimeAndForecast(t *testing.T) {
	jobs, thr := generated(t, 30, 5)
	checked := 0
	_, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 8, Policy: "shockwave",
		OnPlan: func(rd *coordinator.Round) {
			for _, e := range rd.Plan.Explain {
				if e.Regime <= 0 || e.ForecastPrior == "" || !(e.ChangeProb >= 0 && e.ChangeProb <= 1) ||
					!(e.ForecastP10 > 0 && e.ForecastP10 <= e.ForecastRemaining && e.ForecastRemaining <= e.ForecastP90) {
					t.Fatalf("round %d: job %s: explanation lacks online diagnostics: %+v", rd.Index, e.Job, e)
				}
				checked++
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no explanations seen")
	}
}
