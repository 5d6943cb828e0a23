package sim_test

import (
	"encoding/json"
	"testing"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// TestRun_PlanExplanationsChangeNoDecision: the simulator turns the
// Shockwave policy's per-job explanations off when nothing reads them
// (no forecast sampling, no OnPlan hook). A run with them on (an OnPlan
// hook that checks they are there) and a run with them off give the same
// result, byte for byte, in both information modes, with noise and a
// job-level cancellation rate (jobs that leave early).
func TestRun_PlanExplanationsChangeNoDecision(t *testing.T) {
	thr, err := workload.Builtin("tacc")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := workload.Generate(80, 7, thr, workload.GenerateOptions{MeanInterArrival: 20})
	if err != nil {
		t.Fatal(err)
	}
	noise := workload.Noise{Seed: 3, ThroughputNoise: 0.1, RoundNoise: 0.05, CancelRate: 0.1}
	for _, info := range []string{policy.InfoOnline, policy.InfoProfile} {
		cfg := func() sim.Config {
			sw := policy.DefaultShockwaveConfig()
			sw.Info = info
			return sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 8, Policy: "shockwave",
				Options: policy.Options{Config: sw}, Noise: noise}
		}
		quiet, err := sim.Run(cfg())
		if err != nil {
			t.Fatal(err)
		}
		explained := cfg()
		rounds, with := 0, 0
		explained.OnPlan = func(rd *coordinator.Round) {
			rounds++
			if len(rd.Plan.Explain) > 0 {
				with++
			}
		}
		loud, err := sim.Run(explained)
		if err != nil {
			t.Fatal(err)
		}
		if with == 0 || rounds == 0 {
			t.Fatalf("%s: %d of %d rounds explained with an OnPlan hook, want some", info, with, rounds)
		}
		a, _ := json.Marshal(quiet)
		b, _ := json.Marshal(loud)
		if string(a) != string(b) {
			t.Fatalf("%s: the result without explanations differs from the result with them", info)
		}
	}
}

// TestShockwave_SetExplainFalseLeavesPlansUnexplained: the switch the
// simulator uses does what it says.
func TestShockwave_SetExplainFalseLeavesPlansUnexplained(t *testing.T) {
	for _, on := range []bool{true, false} {
		p, err := policy.NewShockwave(policy.DefaultShockwaveConfig())
		if err != nil {
			t.Fatal(err)
		}
		p.SetExplain(on)
		j := &policy.Job{ID: "a", Model: "ResNet-18", Mode: "gns", Workers: 1, Priority: 1,
			InitialBatchSize: 32, BatchSize: 32, DatasetSize: 50000, TotalSteps: 5000, LastRun: -1}
		p.Admit(j)
		plan, err := p.Allocate(&policy.Snapshot{GPUs: 1, RoundSeconds: 120, Jobs: []*policy.Job{j}})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(plan.Explain) > 0; got != on || len(plan.Run) != 1 {
			t.Fatalf("SetExplain(%v): %d explanations, %d jobs run; want explanations %v and the job run", on, len(plan.Explain), len(plan.Run), on)
		}
	}
}
