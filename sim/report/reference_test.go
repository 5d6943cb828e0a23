package report_test

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/report"
)

// plotDirEnv names a directory where TestPlot_ReleasedResults leaves its
// charts for a person to look at (by default they go to a temporary
// directory and are deleted).
const plotDirEnv = "SHOCKWAVE_REPORT_PLOTS"

// releasedOrder is the policy order of spec §7.2.
var releasedOrder = []string{
	"shockwave", "min_total_duration", "finish_time_fairness", "max_min_fairness",
	"allox", "max_sum_throughput_perf", "gandiva_fair",
}

// releasedRun is one run in the released results file (shared/data).
type releasedRun struct {
	Set, Policy, Kind string
	Makespan          float64   `json:"makespan_s"`
	AvgJCT            float64   `json:"avg_jct_s"`
	JCT               []float64 `json:"jct_list_s"`
	FTF               []float64 `json:"finish_time_fairness_list"`
	FTFThemis         []float64 `json:"finish_time_fairness_themis_list"`
	Util              float64   `json:"cluster_util"`
	Rounds            int       `json:"num_rounds"`
	LeaseExt          int       `json:"num_lease_extensions"`
	LeaseOpps         int       `json:"num_lease_extension_opportunities"`
	Schedule          [][]int   `json:"per_round_schedule"`
}

// releasedResults rebuilds sim.Results from the authors' released
// 120-job/32-GPU simulations (spec §7.2). The released pickles have no
// per-round series, so they are reconstructed: rounds start every 120 s,
// active jobs are those arrived and not finished, and busy GPUs add up the
// scale factors of the jobs in each round's schedule.
func releasedResults(t *testing.T) []*sim.Result {
	t.Helper()
	var doc struct {
		GPUs  int     `json:"cluster_gpus"`
		Round float64 `json:"round_s"`
		Runs  []releasedRun
	}
	raw, err := os.ReadFile(shareddata.File(t, "shockwave-reference-results-120jobs-32gpus.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	arrival, gpus := readTrace(t, shareddata.File(t, "shockwave-traces/120jobs-32gpus.trace"))
	var out []*sim.Result
	for _, name := range releasedOrder {
		i := slices.IndexFunc(doc.Runs, func(r releasedRun) bool {
			return r.Set == "tacc_32gpus" && r.Kind == "simulation" && r.Policy == name
		})
		if i < 0 {
			t.Fatalf("no released simulation of %s", name)
		}
		run := doc.Runs[i]
		res := &sim.Result{
			Policy: name, GPUs: doc.GPUs, Jobs: len(run.JCT), Makespan: run.Makespan, AvgJCT: run.AvgJCT,
			Rounds: run.Rounds, JCT: run.JCT, FTF: run.FTF, FTFThemis: run.FTFThemis, Utilization: run.Util,
			WorstFTF: slices.Max(run.FTF), WorstFTFThemis: slices.Max(run.FTFThemis),
			LeaseExtensions: run.LeaseExt, LeaseOpportunities: run.LeaseOpps,
		}
		for _, f := range run.FTF {
			if f > 1.05 {
				res.UnfairPct105 += 100 / float64(len(run.FTF))
			}
			if f > 1.1 {
				res.UnfairPct110 += 100 / float64(len(run.FTF))
			}
		}
		for r, ids := range run.Schedule {
			start := float64(r) * doc.Round
			active, busy := 0, 0
			for j := range arrival {
				if arrival[j] <= start && start < arrival[j]+run.JCT[j] {
					active++
				}
			}
			for _, j := range ids {
				busy += gpus[j]
			}
			res.RoundStart = append(res.RoundStart, start)
			res.RoundActive = append(res.RoundActive, active)
			res.RoundBusy = append(res.RoundBusy, busy)
		}
		out = append(out, res)
	}
	return out
}

// readTrace returns the arrival times and GPU counts of a trace (spec §1,
// fields 12 and 7).
func readTrace(t *testing.T, path string) (arrival []float64, gpus []int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 12 {
			t.Fatalf("trace line with %d fields", len(fields))
		}
		sf, err1 := strconv.Atoi(fields[6])
		at, err2 := strconv.ParseFloat(fields[11], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("trace line %q", sc.Text())
		}
		arrival, gpus = append(arrival, at), append(gpus, sf)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return arrival, gpus
}

// The released makespan, worst ρ and unfair share are all best under
// Shockwave, so the table's ratios to the best must be the ratios to
// Shockwave that spec §7.2 lists.
func TestWriteTable_ReleasedRatiosMatchSpec(t *testing.T) {
	_, tables := blocks(writeTable(t, releasedResults(t)))
	want := map[string][3]float64{ // makespan, worst ρ, unfair (>1.05)
		"OSSP":         {1.00, 4.34, 14.83},
		"Themis":       {1.32, 1.93, 4.5},
		"Gavel":        {1.37, 1.65, 5.0},
		"AlloX":        {1.34, 2.78, 5.5},
		"MST":          {1.32, 2.79, 5.0},
		"Gandiva-Fair": {1.34, 1.04, 10.33},
	}
	for name, w := range want {
		f := row(t, tables[1], name)
		for k, col := range []int{1, 3, 4} {
			got, err := strconv.ParseFloat(strings.TrimSuffix(f[col], "×"), 64)
			if err != nil || math.Abs(got-w[k]) > 0.0051 {
				t.Errorf("%s column %d = %s, spec §7.2 says %.2f", name, col, f[col], w[k])
			}
		}
	}
	m := row(t, tables[0], "Shockwave")
	for _, c := range []string{"24197.4*", "1.784*", "5.00*", "0.817*"} {
		if !slices.Contains(m, c) {
			t.Errorf("Shockwave row %v lacks %s (spec §7.2)", m, c)
		}
	}
}

func TestPlot_ReleasedResults(t *testing.T) {
	dir := os.Getenv(plotDirEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	if err := report.Plot(dir, releasedResults(t)); err != nil {
		t.Fatal(err)
	}
	checkPNGs(t, dir)
	t.Logf("charts in %s (set $%s to keep them)", dir, plotDirEnv)
}
