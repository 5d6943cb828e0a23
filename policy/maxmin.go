package policy

import "fmt"

// MaxMinFairness is Gavel's heterogeneity-agnostic max-min fairness, the
// "Gavel" baseline (spec §5.1, the original's max_min_fairness policy):
//
//	maximize min_i w_i·x_i   subject to 0 ≤ x_i ≤ 1, Σ_i w_i·x_i ≤ G,
//
// with every throughput replaced by 1, so each job gets an equal share of
// GPU time and a 1-GPU job runs w times as often as a w-GPU job.
//
// Let t* be the optimal value: t* = min(G/m, min_i w_i).
//   - If t* = G/m (always when m ≥ G), the solution is unique:
//     x_i = G/(m·w_i).
//   - Otherwise the jobs of the smallest width are fixed at x = 1 and every
//     wider job may take any x_i ∈ [t*/w_i, 1] that fits. The original's
//     interior-point solver (ECOS) returned about the analytic centre of this
//     optimal face, and so does this allocator: it maximizes
//     Σ_free [ln(x_i − t*/w_i) + ln(1 − x_i)] + ln(G − Σ_i w_i·x_i).
//     With a 1-GPU job present (t* = 1) this is exactly the emulation that
//     reproduces the released run's makespan (spec §5.1, §7.4).
//
// Fidelity: on the released 120-job, 32-GPU run the makespan (277 rounds)
// and the worst ρ are reproduced exactly and the average JCT to 1.1 s; the
// schedules first differ at round 148, as spec §9 reports for this
// emulation.
//
// It keeps no state.
type MaxMinFairness struct{}

// NewMaxMinFairness returns the Gavel max-min fairness allocator.
func NewMaxMinFairness() Allocator { return MaxMinFairness{} }

// Name is "gavel".
func (MaxMinFairness) Name() string { return "gavel" }

// Forget keeps no state.
func (MaxMinFairness) Forget(string) {}

// Allocate returns the max-min fair time fractions (spec §5.1).
func (MaxMinFairness) Allocate(s *Snapshot) ([]float64, error) {
	x, err := newShares(s)
	if err != nil || len(x) == 0 {
		return x, err
	}
	m := len(x)
	g := float64(s.GPUs)
	wmin := s.Jobs[0].Workers
	for _, j := range s.Jobs {
		wmin = min(wmin, j.Workers)
	}
	if g/float64(m) <= float64(wmin) {
		for i, j := range s.Jobs {
			x[i] = g / (float64(m) * float64(j.Workers))
		}
		return x, nil
	}
	t := float64(wmin)
	capacity := g
	var vars []centreVar
	var free []int
	for i, j := range s.Jobs {
		if j.Workers == wmin {
			x[i] = 1
			capacity -= float64(j.Workers)
			continue
		}
		w := float64(j.Workers)
		vars = append(vars, centreVar{lo: [2]float64{t / w}, nlo: 1, hi: 1, w: w})
		free = append(free, i)
	}
	if len(free) == 0 {
		return x, nil
	}
	c, ok := analyticCentre(vars, capacity)
	if !ok {
		// Unreachable: t* < G/m leaves room above every lower bound.
		return nil, fmt.Errorf("policy gavel: empty optimal face (G=%d, m=%d)", s.GPUs, m)
	}
	for k, i := range free {
		x[i] = c[k]
	}
	return x, nil
}

// newShares returns a zero share per job of s, after checking that every
// gang fits the cluster (nil and the error otherwise).
func newShares(s *Snapshot) ([]float64, error) {
	if err := checkWidths(s); err != nil {
		return nil, err
	}
	return make([]float64, len(s.Jobs)), nil
}

// checkWidths rejects jobs that need no GPU or more GPUs than exist.
func checkWidths(s *Snapshot) error {
	for _, j := range s.Jobs {
		if j.Workers < 1 || j.Workers > s.GPUs {
			return fmt.Errorf("policy: job %s has gang width %d on %d GPUs", j.ID, j.Workers, s.GPUs)
		}
	}
	return nil
}
