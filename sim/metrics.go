package sim

import (
	"math"
	"slices"
	"strconv"

	"github.com/shockwave-sched/shockwave/sim/workload"
)

// Result holds the metrics of one simulation (spec §6). Per-job lists are in
// trace order (job id = line index).
type Result struct {
	Policy   string  `json:"policy"`
	GPUs     int     `json:"gpus"`
	Nodes    string  `json:"nodes,omitempty"` // the cluster (e.g. "4x8") when not one node
	Jobs     int     `json:"jobs"`
	Makespan float64 `json:"makespan_s"`
	AvgJCT   float64 `json:"avg_jct_s"`
	Rounds   int     `json:"rounds"`

	// Cancelled and Crashed count the jobs that ended early (Config.Noise);
	// the JCT and ρ metrics cover the jobs that completed (their FTF
	// entries are 0).
	Cancelled int `json:"cancelled,omitempty"`
	Crashed   int `json:"crashed,omitempty"`

	WorstFTF       float64 `json:"worst_ftf"`
	WorstFTFThemis float64 `json:"worst_ftf_themis"`
	UnfairPct105   float64 `json:"unfair_pct_105"`
	UnfairPct110   float64 `json:"unfair_pct_110"`
	Utilization    float64 `json:"utilization"`

	LeaseExtensions    int     `json:"lease_extensions"`
	LeaseOpportunities int     `json:"lease_opportunities"`
	EnvyP50            float64 `json:"envy_p50"`
	EnvyP90            float64 `json:"envy_p90"`
	EnvyP99            float64 `json:"envy_p99"`
	EnvyMax            float64 `json:"envy_max"`

	JCT               []float64 `json:"jct_s"`
	FTF               []float64 `json:"ftf"`
	FTFThemis         []float64 `json:"ftf_themis"`
	WorkerUtilization []float64 `json:"worker_utilization"`

	// Per round: start time, active jobs at scheduling, busy GPUs, and the
	// sorted ids of the jobs dispatched.
	RoundStart  []float64 `json:"round_start_s"`
	RoundActive []int     `json:"round_active"`
	RoundBusy   []int     `json:"round_busy_gpus"`
	Schedules   [][]int   `json:"schedules"`

	// Forecasts, with Config.Forecasts, holds each completed job's
	// forecasts at ForecastMarks of its progress, by job then mark.
	Forecasts []ForecastPoint `json:"forecasts,omitempty"`
	// Profiles, with Config.RecordProfiles, is every job's realized
	// profile in trace order (workload.WriteProfiles writes them).
	Profiles []workload.Spec `json:"-"`

	busy []float64
}

func (res *Result) record(start float64, active, gpus int, ids []int) {
	res.RoundStart = append(res.RoundStart, start)
	res.RoundActive = append(res.RoundActive, active)
	res.RoundBusy = append(res.RoundBusy, gpus)
	res.Schedules = append(res.Schedules, ids)
}

func (res *Result) dropLastRound() {
	n := len(res.RoundStart) - 1
	res.RoundStart, res.RoundActive = res.RoundStart[:n], res.RoundActive[:n]
	res.RoundBusy, res.Schedules = res.RoundBusy[:n], res.Schedules[:n]
}

// finish computes the per-job and cluster metrics of spec §6.
func (r *run) finish() {
	res := r.res
	n, g := float64(len(r.jobs)), float64(r.cfg.GPUs)
	contention := math.Max(1, n/g)
	res.JCT = make([]float64, len(r.jobs))
	res.FTF = make([]float64, len(r.jobs))
	res.FTFThemis = make([]float64, len(r.jobs))
	sum := 0.0
	for i, j := range r.jobs {
		res.JCT[i] = j.jct
		switch j.early {
		case workload.Cancelled:
			res.Cancelled++
			continue
		case workload.Crashes:
			res.Crashed++
			continue
		}
		sum += j.jct
		res.FTF[i] = RoundPy(j.jct/(j.iso*contention), 5)
		res.FTFThemis[i] = RoundPy(j.jct/(j.iso*r.themisFactor(j)), 5)
		if res.FTF[i] > 1.05 {
			res.UnfairPct105++
		}
		if res.FTF[i] > 1.1 {
			res.UnfairPct110++
		}
	}
	done := n - float64(res.Cancelled+res.Crashed)
	res.AvgJCT = sum / max(done, 1)
	res.UnfairPct105 = 100 * res.UnfairPct105 / max(done, 1)
	res.UnfairPct110 = 100 * res.UnfairPct110 / max(done, 1)
	res.WorstFTF = slices.Max(res.FTF)
	res.WorstFTFThemis = slices.Max(res.FTFThemis)
	res.WorkerUtilization = make([]float64, r.cfg.GPUs)
	for w, b := range res.busy {
		res.WorkerUtilization[w] = RoundPy(b/res.Makespan, 5)
	}
	res.Utilization = mean(res.WorkerUtilization)
	r.envy()
}

// themisFactor is max(1, mean active jobs over the job's lifetime / G), the
// contention factor of the Themis-variant ρ (spec §6).
func (r *run) themisFactor(j *simJob) float64 {
	s, e := j.admitRound, j.endRound
	if e < 0 || e > len(r.res.RoundActive) {
		e = len(r.res.RoundActive)
	}
	if s < 0 || s >= e {
		return 1
	}
	total := 0.0
	for _, a := range r.res.RoundActive[s:e] {
		total += float64(a)
	}
	return math.Max(1, total/float64(e-s)/float64(r.cfg.GPUs))
}

// envy is the distribution of |r_i − r_j| over job pairs, where r_i is the
// fraction of a job's active rounds in which it ran (spec §6): its
// percentiles and maximum, as if the n(n−1)/2 differences were listed and
// sorted, without listing them (pairDiffs).
func (r *run) envy() {
	share := make([]float64, 0, len(r.jobs))
	for _, j := range r.jobs {
		if t := j.scheduled + j.queued; t > 0 {
			share = append(share, float64(j.scheduled)/float64(t))
		}
	}
	d := newPairDiffs(share)
	if d.n == 0 {
		return
	}
	res := r.res
	res.EnvyP50, res.EnvyP90, res.EnvyP99 = percentileAt(d.n, 50, d.at), percentileAt(d.n, 90, d.at), percentileAt(d.n, 99, d.at)
	res.EnvyMax = d.at(d.n - 1)
}

// pairDiffs is the sorted list of |s_i − s_k| over pairs i < k of a set of
// non-negative finite values, read by rank without being built: n values
// take O(n) memory instead of O(n²), and one rank O(n·64) time.
//
// With s sorted, the pair difference fl(s_k − s_i), i < k, rises with k
// and falls with i (IEEE subtraction is correctly rounded, hence
// monotone), and fl(s_k − s_i) = |fl(s_i − s_k)| (rounding is symmetric),
// so the differences are exactly the values the list holds. The rank-r
// value is the least d with more than r differences ≤ d; counting them is
// one two-pointer pass, and d is bisected over the bit patterns of
// non-negative float64s, which order like the values. The answer is one
// of the differences, bit for bit.
type pairDiffs struct {
	s []float64 // sorted
	n int       // pairs
}

func newPairDiffs(share []float64) pairDiffs {
	s := slices.Clone(share)
	slices.Sort(s)
	return pairDiffs{s: s, n: len(s) * (len(s) - 1) / 2}
}

// atMost counts the pairs whose difference is at most d.
func (p pairDiffs) atMost(d float64) int {
	count, lo := 0, 0
	for k, x := range p.s {
		for x-p.s[lo] > d {
			lo++
		}
		count += k - lo
	}
	return count
}

// at returns the difference of rank r (0-based) in ascending order.
func (p pairDiffs) at(r int) float64 {
	lo, hi := uint64(0), math.Float64bits(p.s[len(p.s)-1]-p.s[0])
	for lo < hi { // the least bit pattern whose value has more than r pairs at or below it
		mid := lo + (hi-lo)/2
		if p.atMost(math.Float64frombits(mid)) > r {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return math.Float64frombits(lo)
}

// percentile interpolates linearly between the closest ranks of sorted xs.
func percentile(xs []float64, p float64) float64 {
	return percentileAt(len(xs), p, func(i int) float64 { return xs[i] })
}

// percentileAt is percentile over a sorted list of n values read by rank.
func percentileAt(n int, p float64, at func(int) float64) float64 {
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	if lo+1 >= n {
		return at(n - 1)
	}
	x := at(lo)
	return x + (pos-float64(lo))*(at(lo+1)-x)
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// RoundPy rounds x to d decimals the way Python's round(x, d) does: the
// correctly rounded decimal, ties to even.
func RoundPy(x float64, d int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', d, 64), 64)
	return v
}
