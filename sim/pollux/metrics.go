package pollux

import (
	"fmt"
	"slices"
)

// RhoThreshold is the finish-time-fairness level above which a job counts
// as treated unfairly in Result.UnfairShare.
const RhoThreshold = 1.05

// Result summarises one run.
type Result struct {
	Policy      string
	Jobs        int
	AvgJCT      float64        // seconds, mean over jobs
	Makespan    int            // seconds from 0 to the last completion
	WorstRho    float64        // max over jobs of JCT / isolated JCT
	UnfairShare float64        // share of jobs with ρ > RhoThreshold
	JCT         map[string]int // per job, seconds
	Rho         map[string]float64
}

// Summarise computes the metrics of completed jobs; isolated gives each
// job's JCT alone on the cluster at its trace configuration (nil: no ρ).
func Summarise(policy string, jobs []*Job, isolated map[string]int) (*Result, error) {
	r := &Result{Policy: policy, Jobs: len(jobs), JCT: map[string]int{}, Rho: map[string]float64{}}
	sum, unfair := 0, 0
	for _, j := range jobs {
		if !j.Done() {
			return nil, fmt.Errorf("pollux: job %s did not complete", j.Name)
		}
		jct := j.Completion - j.Submit
		r.JCT[j.Name] = jct
		sum += jct
		r.Makespan = max(r.Makespan, j.Completion)
		if iso, ok := isolated[j.Name]; ok && iso > 0 {
			rho := float64(jct) / float64(iso)
			r.Rho[j.Name] = rho
			r.WorstRho = max(r.WorstRho, rho)
			if rho > RhoThreshold {
				unfair++
			}
		}
	}
	r.AvgJCT = float64(sum) / float64(len(jobs))
	if len(r.Rho) > 0 {
		r.UnfairShare = float64(unfair) / float64(len(r.Rho))
	}
	return r, nil
}

// Isolated is a job's run alone on the cluster at its trace width and
// batch size: its JCT (the wait for the next interval boundary and the 30 s
// start delay included) and its mean progress rate while executing.
type Isolated struct {
	JCT  int
	Rate float64 // progress (steps at the initial batch size) per second
}

// IsolatedRuns runs every job alone (Tiresias+TunedJobs with no
// competitor: packed placement) on cfg's cluster.
func IsolatedRuns(rows []WorkloadRow, cfg Config) (map[string]Isolated, error) {
	out := make(map[string]Isolated, len(rows))
	for _, w := range rows {
		c := cfg
		c.Workload = []WorkloadRow{w}
		c.Policy = NewTiresias()
		c.Setup = SetupTiresias
		c.OnInterval = nil
		jobs, err := Run(c)
		if err != nil {
			return nil, fmt.Errorf("isolated %s: %w", w.Name, err)
		}
		j := jobs[0]
		out[w.Name] = Isolated{JCT: j.Completion - j.Submit, Rate: j.Progress / j.Busy}
	}
	return out, nil
}

// JCTs extracts the JCTs of isolated runs.
func JCTs(iso map[string]Isolated) map[string]int {
	out := make(map[string]int, len(iso))
	for k, v := range iso {
		out[k] = v.JCT
	}
	return out
}

// SortedNames returns the job names of r in a stable order.
func (r *Result) SortedNames() []string {
	out := make([]string, 0, len(r.JCT))
	for n := range r.JCT {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
