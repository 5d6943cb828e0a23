package sim

import (
	"math"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// recordEpochs notes the batch size and speed of the epochs that a
// micro-task of n steps at speed v starts (Config.RecordProfiles), before
// the steps are counted.
func (j *simJob) recordEpochs(n int64, v float64) {
	if n <= 0 || !(v > 0) {
		return
	}
	ipe := int64(j.itersPerEpoch())
	if ipe <= 0 {
		return
	}
	first, last := int(max(j.st.Done, 0)/ipe), int((max(j.st.Done, 0)+n-1)/ipe)
	for e := max(first, len(j.recBS)); e <= last; e++ {
		for len(j.recBS) < e { // epochs skipped by a rescale's rounding keep the last values
			j.recBS, j.recThr = append(j.recBS, j.st.BatchSize), append(j.recThr, v)
		}
		j.recBS, j.recThr = append(j.recBS, j.st.BatchSize), append(j.recThr, v)
	}
}

// exportProfiles builds every job's realized profile: the batch size and
// throughput of each epoch as the job ran it. A job that ended early gets
// the epochs it ran, its total steps cut to them, so that a replay runs
// exactly those.
func (r *run) exportProfiles() []workload.Spec {
	out := make([]workload.Spec, 0, len(r.jobs))
	for _, j := range r.jobs {
		sp := j.spec
		E := workload.Epochs(sp.Model, sp.BatchSize, sp.TotalSteps)
		bs, thr := j.recBS, j.recThr
		if len(bs) == 0 {
			bs, thr = []int{sp.BatchSize}, []float64{j.thr0}
		}
		if j.early != workload.RunsToEnd {
			E = min(E, len(bs))
			sp.TotalSteps = min(sp.TotalSteps, int64(E)*int64(workload.IterationsPerEpoch(sp.Model, sp.BatchSize)))
		}
		p := &workload.JobProfile{BatchSizes: make([]int, E), Throughputs: make([]float64, E)}
		for e := range E {
			k := min(e, len(bs)-1)
			p.BatchSizes[e], p.Throughputs[e] = bs[k], thr[k]
		}
		p.BatchSizes[0] = sp.BatchSize
		if math.IsNaN(p.Throughputs[0]) {
			p.Throughputs[0] = j.thr0
		}
		sp.Profile = p
		out = append(out, sp)
	}
	return out
}

// adoptProfile applies a profiled job's batch-size change at the round
// boundary, as a real job changes at the epoch boundary: the next epoch to
// start runs at the batch size its profile gives it (no lag), so a replay
// of an exported run records the same per-epoch batch sizes.
func (r *run) adoptProfile(j *simJob) error {
	st := j.st
	if !(st.Grow || st.Shrink) || !st.Rescale(j.spec, r.cfg.Throughputs) {
		return nil
	}
	j.changes++
	if _, err := r.send(j, protocol.EventBatchSize, 0, 0); err != nil {
		return err
	}
	if st.TotalSteps-st.Done > 0 {
		return nil
	}
	if _, err := r.send(j, protocol.EventDone, 0, 0); err != nil {
		return err
	}
	r.settleForecasts(j)
	r.end(j, j.lastFinish)
	return nil
}
