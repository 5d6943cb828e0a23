package sim_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// released is one run of the authors' released results (extracted from their
// result pickles; shared/data/shockwave-reference-results-120jobs-32gpus.json).
type released struct {
	Set       string    `json:"set"`
	Policy    string    `json:"policy"`
	Kind      string    `json:"kind"`
	Makespan  float64   `json:"makespan_s"`
	AvgJCT    float64   `json:"avg_jct_s"`
	JCT       []float64 `json:"jct_list_s"`
	FTF       []float64 `json:"finish_time_fairness_list"`
	FTFThemis []float64 `json:"finish_time_fairness_themis_list"`
	Util      float64   `json:"cluster_util"`
	Rounds    int       `json:"num_rounds"`
	Schedules [][]int   `json:"per_round_schedule"`
}

func loadReleased(t *testing.T, policy string) *released {
	t.Helper()
	p := shareddata.File(t, "shockwave-reference-results-120jobs-32gpus.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Runs []released `json:"runs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for i := range doc.Runs {
		r := &doc.Runs[i]
		if r.Set == "tacc_32gpus" && r.Kind == "simulation" && r.Policy == policy {
			return r
		}
	}
	t.Fatalf("no released simulation run of %s", policy)
	return nil
}

// replay32 simulates the canonical 120-job, 32-GPU experiment in the
// original's compatibility mode.
func replay32(t *testing.T, policy string) *sim.Result {
	t.Helper()
	dir := shareddata.Dir(t)
	jobs, err := workload.ReadTraceFile(filepath.Join(dir, "shockwave-traces", "120jobs-32gpus.trace"))
	if err != nil {
		t.Fatal(err)
	}
	thr, err := workload.LoadThroughputs(filepath.Join(dir, "tacc_throughputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 32, Policy: policy, Compat: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func relErr(got, want float64) float64 { return math.Abs(got-want) / math.Abs(want) }

// TestFidelity_GandivaFairReproducesReleasedRunExactly checks the claim of
// spec §9: sections 1-3 plus the Gandiva-Fair rule reproduce the released
// run bit for bit.
func TestFidelity_GandivaFairReproducesReleasedRunExactly(t *testing.T) {
	checkExact(t, "gandiva_fair", "gandiva_fair", 1e-6)
}

// TestFidelity_AlloXReproducesReleasedRunExactly: AlloX's allocation is a
// SciPy-faithful assignment (same tie rules), so its run matches too.
func TestFidelity_AlloXReproducesReleasedRunExactly(t *testing.T) {
	// Utilization is the mean of per-GPU shares rounded to 5 decimals;
	// one GPU's share differs by 4e-5 (gang placement on GPU ids, which
	// affects no job), hence 1e-5 instead of 1e-6.
	checkExact(t, "allox", "allox", 1e-5)
}

func checkExact(t *testing.T, policy, releasedName string, utilTol float64) {
	ref := loadReleased(t, releasedName)
	res := replay32(t, policy)
	if res.Rounds != ref.Rounds || len(res.Schedules) != len(ref.Schedules) {
		t.Fatalf("rounds: got %d, released %d", res.Rounds, ref.Rounds)
	}
	for k := range ref.Schedules {
		want := slices.Clone(ref.Schedules[k])
		slices.Sort(want)
		if !slices.Equal(res.Schedules[k], want) {
			t.Fatalf("round %d schedule: got %v, released %v", k, res.Schedules[k], want)
		}
	}
	if relErr(res.Makespan, ref.Makespan) > 1e-9 {
		t.Errorf("makespan: got %.6f, released %.6f", res.Makespan, ref.Makespan)
	}
	for i := range ref.JCT {
		if math.Abs(res.JCT[i]-ref.JCT[i]) > 1e-6 {
			t.Errorf("job %d JCT: got %.6f, released %.6f", i, res.JCT[i], ref.JCT[i])
		}
		if math.Abs(res.FTF[i]-ref.FTF[i]) > 1e-6 || math.Abs(res.FTFThemis[i]-ref.FTFThemis[i]) > 1e-6 {
			t.Errorf("job %d ρ: got %v / %v, released %v / %v", i, res.FTF[i], res.FTFThemis[i], ref.FTF[i], ref.FTFThemis[i])
		}
	}
	if math.Abs(res.Utilization-ref.Util) > utilTol {
		t.Errorf("utilization: got %.9f, released %.9f", res.Utilization, ref.Util)
	}
}

// tolerance is the agreement required with a released baseline run.
type tolerance struct {
	policy, released      string
	makespan, avgJCT, ftf float64 // relative; 0 = not checked
}

// Baselines whose allocation solves an optimization problem can land on a
// different point of a non-unique optimum than the original's solver did, so
// they are compared within tolerances (issue: Gavel 0.1 % / 1 % / 2 %, the
// others 3 % on makespan and average JCT). The comment beside each policy's
// allocator explains the remaining difference.
var baselineTolerances = []tolerance{
	// Makespan and worst ρ exact, average JCT +0.01 %: the analytic-centre
	// emulation of ECOS picks a slightly different point of the optimal
	// face once m < G (schedules first differ at round 148).
	{policy: "gavel", released: "max_min_fairness", makespan: 0.001, avgJCT: 0.01, ftf: 0.02},
	// +0.50 % / +0.10 %: when capacity does not bind, Gurobi returned a point
	// of the optimal face that no centre-type rule reproduces (first
	// difference at round 19, the first contended re-allocation).
	{policy: "themis", released: "finish_time_fairness", makespan: 0.03, avgJCT: 0.03},
	// Exact (TestFidelity_AlloXReproducesReleasedRunExactly); kept here too.
	{policy: "allox", released: "allox", makespan: 0.03, avgJCT: 0.03},
	// +0.38 % / +0.63 %: ECOS splits exact θ/w ties and returns tiny
	// positive shares; the emulation matches until round 49.
	{policy: "mst", released: "max_sum_throughput_perf", makespan: 0.03, avgJCT: 0.03},
	// +0.06 % / +0.75 %: a feasibility problem; ECOS returns some interior
	// point, emulated by the analytic centre (first difference at round 19).
	{policy: "ossp", released: "min_total_duration", makespan: 0.03, avgJCT: 0.03},
}

func TestFidelity_BaselinesMatchReleasedRuns(t *testing.T) {
	for _, tc := range baselineTolerances {
		t.Run(tc.policy, func(t *testing.T) {
			ref := loadReleased(t, tc.released)
			res := replay32(t, tc.policy)
			t.Logf("%s: makespan %.1f (released %.1f), avg JCT %.1f (%.1f), worst ρ %.3f (%.3f), rounds %d (%d)",
				tc.policy, res.Makespan, ref.Makespan, res.AvgJCT, ref.AvgJCT, res.WorstFTF, slices.Max(ref.FTF), res.Rounds, ref.Rounds)
			if e := relErr(res.Makespan, ref.Makespan); e > tc.makespan {
				t.Errorf("makespan %.1f vs released %.1f: off by %.2f%% (tolerance %.2f%%)", res.Makespan, ref.Makespan, 100*e, 100*tc.makespan)
			}
			if e := relErr(res.AvgJCT, ref.AvgJCT); e > tc.avgJCT {
				t.Errorf("avg JCT %.1f vs released %.1f: off by %.2f%% (tolerance %.2f%%)", res.AvgJCT, ref.AvgJCT, 100*e, 100*tc.avgJCT)
			}
			if tc.ftf > 0 {
				if e := relErr(res.WorstFTF, slices.Max(ref.FTF)); e > tc.ftf {
					t.Errorf("worst ρ %.3f vs released %.3f: off by %.2f%% (tolerance %.2f%%)", res.WorstFTF, slices.Max(ref.FTF), 100*e, 100*tc.ftf)
				}
			}
		})
	}
}
