package market

import "slices"

// modelCache remembers the last model built for an instance. A model's
// curves, classes and sorted job-rounds depend only on the jobs and the
// weights; of its fields only the FTF lower bounds (jobModel.ftfLo) read
// the instance's current FTF bound, which the tightest fairness rule
// changes between two models of one solve (fair.go). A second model with
// the same weights is therefore the first (its curves shared, read-only)
// with its lower bounds recomputed into model.lo, the same values newModel
// would compute.
type modelCache struct {
	weights []float64
	ftf     bool
	m       *model
}

// reuseModel returns newModel(in, weights, ftf) made from the last model
// built for in, or nil when that had other weights or another phase.
func (in *instance) reuseModel(weights []float64, ftf bool) *model {
	c := in.models
	if c == nil || c.ftf != ftf || !slices.Equal(c.weights, weights) {
		return nil
	}
	m := *c.m
	if ftf {
		m.lo = make([]int, len(m.jobs))
		for k := range m.jobs {
			if r := int(m.rep[k]); r != k {
				m.lo[k] = m.lo[r] // the same job but its ID
				continue
			}
			m.lo[k] = in.ftfLow(&in.jobs[k], &m.jobs[k])
		}
	}
	return &m
}

// remember keeps m as the instance's last model.
func (in *instance) remember(m *model, weights []float64) {
	in.models = &modelCache{weights: slices.Clone(weights), ftf: m.ftf, m: m}
}

// ftfLow is the least n ≤ hi whose remaining time meets the FTF
// constraint at the instance's current bound (raised to the critical
// bound of FairnessTightest when one is set), or −1 if none does.
func (in *instance) ftfLow(j *Job, jm *jobModel) int {
	for n := 0; n <= jm.hi; n++ {
		if in.ftfAt(j, n, jm.r[n]) {
			return max(n, in.critLow(j, jm)) // the critical bound, when set (fair.go)
		}
	}
	return -1
}
