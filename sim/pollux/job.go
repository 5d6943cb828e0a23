package pollux

import (
	"fmt"
	"math"
)

// RestartSeconds is the delay after every re-allocation, first start
// included, during which a job makes no progress (spec §3.4).
const RestartSeconds = 30

// Job is one simulated training job (spec §3).
type Job struct {
	Name       string
	App        *App
	Submit     int
	Replicas   int // the trace's num_replicas (TunedJobs)
	BatchSize  int // the trace's batch_size (TunedJobs)
	Completion int // -1 while running

	// TargetBatch fixes the global batch size (0: adaptive, the agent
	// chooses). TargetReplicas is the fixed width of gang policies (0: none).
	TargetBatch    int
	TargetReplicas int

	// Alloc lists a node index per replica, grouped by node; nil when idle.
	Alloc     []int
	placement []int // replicas per node of Alloc, in allocation order
	nodes     int
	replicas  int

	Atomic, Accum int // per-GPU batch size a and accumulation steps s
	rescale       int // remaining restart delay, seconds
	Progress      float64
	Epoch         int
	Attained      float64 // GPU-seconds
	Busy          float64 // seconds of progress-making execution (restart delays excluded)
	Restarts      int     // -1 until the first allocation

	Profile  []ProfileEntry
	profKeys map[[3]int]bool
	Perf     *PerfParams
	Grad     GradParams
	MaxProf  int // largest replica count in the profile
}

// NewJob makes a job of app from a workload row.
func NewJob(w WorkloadRow, app *App) *Job {
	return &Job{Name: w.Name, App: app, Submit: w.Time, Replicas: w.Replicas, BatchSize: w.BatchSize,
		Completion: -1, Restarts: -1, profKeys: map[[3]int]bool{}}
}

// Done reports whether the job completed.
func (j *Job) Done() bool { return j.Completion >= 0 }

// BatchNow is the current global batch size r·a·(s+1).
func (j *Job) BatchNow() int { return j.replicas * j.Atomic * (j.Accum + 1) }

// Goodput returns the agent's goodput function from its fitted model.
func (j *Job) Goodput() *Goodput {
	a := j.App
	return &Goodput{Perf: *j.Perf, Grad: j.Grad, InitBsz: a.InitBsz, MaxBsz: a.MaxBsz, MinLocal: a.MinLocal, MaxLocal: a.MaxLocal}
}

// fixedBatch splits global batch size b over r replicas (spec §3.2).
func fixedBatch(app *App, b, r int) (a, s int) {
	local := math.Ceil(float64(b)/float64(r) - eps)
	s = int(math.Ceil(local/float64(app.MaxLocal)-eps)) - 1
	if r == 1 && b > app.InitBsz {
		s = max(s, 1)
	}
	return int(math.Ceil(local/float64(s+1) - eps)), s
}

// updateLocalBsz chooses (a, s) for the current placement (spec §3.2).
func (j *Job) updateLocalBsz() {
	r, n := j.replicas, j.nodes
	app := j.App
	if j.TargetBatch == 0 && j.Perf != nil {
		_, j.Atomic, j.Accum = j.Goodput().Optimize(n, r)
	} else {
		b := j.TargetBatch
		if b == 0 {
			b = max(app.InitBsz, app.MinLocal*r)
		}
		j.Atomic, j.Accum = fixedBatch(app, b, r)
	}
	j.Atomic = min(j.Atomic, int(float64(app.MaxBsz)/float64(r*(j.Accum+1))))
}

// Reallocate applies a new allocation (spec §3.4).
func (j *Job) Reallocate(alloc []int) {
	if len(alloc) == 0 {
		j.Alloc, j.placement, j.nodes, j.replicas, j.Atomic = nil, nil, 0, 0, 0
		return
	}
	j.Alloc = append(j.Alloc[:0:0], alloc...)
	j.placement = j.placement[:0]
	for i, nd := range alloc {
		if i == 0 || nd != alloc[i-1] {
			j.placement = append(j.placement, 0)
		}
		j.placement[len(j.placement)-1]++
	}
	j.nodes, j.replicas = len(j.placement), len(alloc)
	j.updateLocalBsz()
	j.rescale = RestartSeconds
	j.Restarts++ // -1 (never allocated) becomes 0 on the first allocation
}

// Step advances the job by seconds starting at time now (spec §3.3).
func (j *Job) Step(now, seconds int, interference float64) error {
	if j.replicas == 0 || j.Done() {
		return nil
	}
	d := min(j.rescale, seconds)
	j.Attained += float64(d * j.replicas)
	j.rescale -= d
	seconds -= d
	now += d
	app := j.App
	for seconds > 0 && !j.Done() {
		b := j.BatchNow()
		scale := float64(b) / float64(app.InitBsz)
		step, sync, err := app.Throughput(j.placement, j.Atomic)
		if err != nil {
			return fmt.Errorf("job %s: %w", j.Name, err)
		}
		total := step + (step-sync)*float64(j.Accum)
		sqr, v := app.GradStats(float64(b), j.Epoch)
		gain := (v + sqr) / (v/scale + sqr)
		j.Grad = GradParams{sqr, v}
		key := [3]int{j.nodes, j.replicas, j.Atomic}
		if !j.profKeys[key] {
			j.profKeys[key] = true
			j.Profile = append(j.Profile, ProfileEntry{j.nodes, j.replicas, j.Atomic, step, sync})
			j.MaxProf = max(j.MaxProf, j.replicas)
			p := FitPerfParams(j.Profile)
			j.Perf = &p
		}
		goodput := gain / total * (1 - interference)
		next := app.ProgressAt(j.Epoch + 1)
		if j.Progress+goodput*float64(seconds) < next {
			j.Progress += goodput * float64(seconds)
			j.Attained += float64(seconds * j.replicas)
			j.Busy += float64(seconds)
			now += seconds
			seconds = 0
		} else {
			j.Epoch++
			delta := int(math.RoundToEven((next - j.Progress) / goodput))
			if j.Epoch > app.MaxEpochs-1 {
				j.Completion = now + delta
			}
			j.Progress = next
			j.Attained += float64(delta * j.replicas)
			j.Busy += float64(delta)
			now += delta
			seconds -= delta
		}
		j.updateLocalBsz()
	}
	return nil
}
