package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/shockwave-sched/shockwave/sim"
)

// jsonResult is the JSON form of one result. Other tools rely on the names
// and order of the first ten fields; fields after them may grow. Per-round
// series stay out (they belong in a dump, not a summary).
type jsonResult struct {
	Policy       string    `json:"policy"`
	Makespan     float64   `json:"makespan_s"`
	AvgJCT       float64   `json:"avg_jct_s"`
	WorstFTF     float64   `json:"worst_ftf"`
	UnfairPct105 float64   `json:"unfair_pct_105"`
	UnfairPct110 float64   `json:"unfair_pct_110"`
	Utilization  float64   `json:"utilization"`
	Rounds       int       `json:"rounds"`
	JCT          []float64 `json:"jct_s"`
	FTF          []float64 `json:"ftf"`

	GPUs               int       `json:"gpus"`
	Jobs               int       `json:"jobs"`
	WorstFTFThemis     float64   `json:"worst_ftf_themis"`
	FTFThemis          []float64 `json:"ftf_themis"`
	LeaseExtensions    int       `json:"lease_extensions"`
	LeaseOpportunities int       `json:"lease_opportunities"`
	EnvyP50            float64   `json:"envy_p50"`
	EnvyP90            float64   `json:"envy_p90"`
	EnvyP99            float64   `json:"envy_p99"`
	EnvyMax            float64   `json:"envy_max"`
	Nodes              string    `json:"nodes,omitempty"`
	// Jobs that ended early under a noisy workload (absent otherwise).
	Cancelled int `json:"cancelled,omitempty"`
	Crashed   int `json:"crashed,omitempty"`
}

func newJSONResult(r *sim.Result) jsonResult {
	return jsonResult{
		Policy:             r.Policy,
		Makespan:           r.Makespan,
		AvgJCT:             r.AvgJCT,
		WorstFTF:           r.WorstFTF,
		UnfairPct105:       r.UnfairPct105,
		UnfairPct110:       r.UnfairPct110,
		Utilization:        r.Utilization,
		Rounds:             r.Rounds,
		JCT:                list(r.JCT),
		FTF:                list(r.FTF),
		GPUs:               r.GPUs,
		Jobs:               r.Jobs,
		WorstFTFThemis:     r.WorstFTFThemis,
		FTFThemis:          list(r.FTFThemis),
		LeaseExtensions:    r.LeaseExtensions,
		LeaseOpportunities: r.LeaseOpportunities,
		EnvyP50:            r.EnvyP50,
		EnvyP90:            r.EnvyP90,
		EnvyP99:            r.EnvyP99,
		Cancelled:          r.Cancelled,
		Crashed:            r.Crashed,
		EnvyMax:            r.EnvyMax,
		Nodes:              r.Nodes,
	}
}

// list makes a nil list print as [] rather than null.
func list(xs []float64) []float64 {
	if xs == nil {
		return []float64{}
	}
	return xs
}

// finite names the first field of r that JSON cannot carry (NaN or ±Inf).
func (r *jsonResult) finite() error {
	scalars := []struct {
		name string
		v    float64
	}{
		{"makespan_s", r.Makespan}, {"avg_jct_s", r.AvgJCT}, {"worst_ftf", r.WorstFTF},
		{"unfair_pct_105", r.UnfairPct105}, {"unfair_pct_110", r.UnfairPct110},
		{"utilization", r.Utilization}, {"worst_ftf_themis", r.WorstFTFThemis},
		{"envy_p50", r.EnvyP50}, {"envy_p90", r.EnvyP90}, {"envy_p99", r.EnvyP99},
		{"envy_max", r.EnvyMax},
	}
	for _, s := range scalars {
		if math.IsNaN(s.v) || math.IsInf(s.v, 0) {
			return fmt.Errorf("report: policy %q: %s is %v, which JSON cannot represent", r.Policy, s.name, s.v)
		}
	}
	lists := []struct {
		name string
		xs   []float64
	}{{"jct_s", r.JCT}, {"ftf", r.FTF}, {"ftf_themis", r.FTFThemis}}
	for _, l := range lists {
		for i, v := range l.xs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("report: policy %q: %s[%d] is %v, which JSON cannot represent", r.Policy, l.name, i, v)
			}
		}
	}
	return nil
}

// WriteJSON writes results as one JSON object,
//
//	{"results":[{"policy":…,"makespan_s":…,"avg_jct_s":…,"worst_ftf":…,
//	  "unfair_pct_105":…,"unfair_pct_110":…,"utilization":…,"rounds":…,
//	  "jct_s":[…],"ftf":[…], …further fields…}, …]}
//
// with one result per line, in the order given, and per-job lists in trace
// order. Numbers use the shortest form that reads back to the same float64.
// The output is a function of the input alone. Nothing is written when a
// result is nil or holds a value JSON cannot carry (NaN, ±Inf); the error
// names the policy and field.
func WriteJSON(w io.Writer, results []*sim.Result) error {
	if err := check(results); err != nil {
		return err
	}
	lines := make([][]byte, len(results))
	for i, r := range results {
		jr := newJSONResult(r)
		if err := jr.finite(); err != nil {
			return err
		}
		b, err := json.Marshal(&jr)
		if err != nil {
			return fmt.Errorf("report: policy %q: %w", r.Policy, err)
		}
		lines[i] = b
	}
	bw := bufio.NewWriter(w)
	bw.WriteString(`{"results":[`)
	for i, b := range lines {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteByte('\n')
		bw.Write(b)
	}
	if len(lines) > 0 {
		bw.WriteByte('\n')
	}
	bw.WriteString("]}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: write JSON: %w", err)
	}
	return nil
}
