package workload

import "fmt"

// Profile is a job's planned future (spec §2.3, §2.4): what the original's
// driver gives Shockwave and the metrics.
type Profile struct {
	// Epochs is E = ceil(total_steps / ceil(D / bs0)) (spec §2.1).
	Epochs int
	// BatchSizes[e] is the planned batch size of epoch e (PlannedBatchSizes).
	BatchSizes []int
	// EpochSeconds[e] = (D / BatchSizes[e]) / thr(model@BatchSizes[e], sf),
	// a real division without ceil (spec §2.4).
	EpochSeconds []float64
	// IsolatedSeconds is T_iso = Σ_e EpochSeconds[e], summed in epoch order:
	// the adapted isolated run time that replaces the trace's duration in
	// the finish-time-fairness metric and the over-deadline rule (§2.4,
	// §3.6, §6).
	IsolatedSeconds float64
}

// NewProfile builds the planned profile of a job from its trace line and
// the throughput table the trace was generated with (spec §2.4). It fails
// when the model is unknown, or when a planned batch size has no positive
// throughput on the job's scale factor (the original would divide by zero
// or miss a key).
//
// Example (spec §2.4): job 35 of the 120-job trace, ResNet-50 bs32
// accordion with 29992 steps, has E = 10 critical epochs and T_iso =
// 10·3125/5.8993… ≈ 5297.2 s with the tacc table.
func NewProfile(sp Spec, thr *Throughputs) (Profile, error) {
	d := DatasetSize(sp.Model)
	if d == 0 {
		return Profile{}, fmt.Errorf("unknown model %q", sp.Model)
	}
	E := Epochs(sp.Model, sp.BatchSize, sp.TotalSteps)
	if jp := sp.Profile; jp != nil { // the job's own: what it declares is what it did
		if err := jp.check(sp); err != nil {
			return Profile{}, err
		}
		p := Profile{Epochs: E, BatchSizes: append([]int(nil), jp.BatchSizes...), EpochSeconds: make([]float64, E)}
		for e, bs := range jp.BatchSizes {
			p.EpochSeconds[e] = float64(d) / float64(bs) / jp.Throughputs[e]
			p.IsolatedSeconds += p.EpochSeconds[e]
		}
		return p, nil
	}
	p := Profile{
		Epochs:       E,
		BatchSizes:   PlannedBatchSizes(sp.Model, sp.BatchSize, sp.ScaleFactor, E, sp.Mode),
		EpochSeconds: make([]float64, E),
	}
	rate := map[int]float64{}
	for e, bs := range p.BatchSizes {
		v, ok := rate[bs]
		if !ok {
			var err error
			if v, err = thr.positive(JobType(sp.Model, bs), sp.ScaleFactor); err != nil {
				return Profile{}, fmt.Errorf("profile epoch %d: %v", e, err)
			}
			rate[bs] = v
		}
		p.EpochSeconds[e] = float64(d) / float64(bs) / v
		p.IsolatedSeconds += p.EpochSeconds[e]
	}
	return p, nil
}
