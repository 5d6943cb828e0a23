package sim

import (
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// realize draws the job's realization (Config.Noise): its speed and
// schedule jitter go into its state, its realized isolated run time
// becomes the denominator of its finish-time fairness. The profile the job
// declares at registration stays the nominal one: a job cannot know its
// own draws.
func (j *simJob) realize(noise workload.Noise, thr *workload.Throughputs) error {
	j.real = noise.Realize(j.spec)
	if j.real == nil {
		return nil
	}
	j.st.Realize(j.spec, j.real)
	p, err := workload.RealizedProfile(j.spec, thr, j.real)
	if err != nil {
		return err
	}
	j.iso = p.IsolatedSeconds
	return nil
}

// endEarly ends a job whose drawn early end came: a cancelled job is
// withdrawn from the Core; a crashing one keeps its leases and makes no
// progress until the Core ends it (spec §3.5). It reports whether the job
// ended now.
func (r *run) endEarly(j *simJob) (bool, error) {
	re := j.real
	if re == nil || re.End == workload.RunsToEnd || j.crashed || j.st.TotalSteps <= 0 ||
		float64(j.st.Done) < re.EndAt*float64(j.st.TotalSteps) {
		return false, nil
	}
	if re.End == workload.Crashes {
		j.crashed = true
		return false, nil
	}
	if err := r.core.Cancel(r.now, j.id, "cancelled by its owner"); err != nil {
		return false, err
	}
	j.early = workload.Cancelled
	j.marks = nil // no truth to compare with
	r.end(j, j.finish)
	return true, nil
}
