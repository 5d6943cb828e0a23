package pollux

import "fmt"

// TiresiasThreshold is the GPU-seconds after which a job is demoted from the
// first to the second queue (16 GPU-hours, spec §6.3).
const TiresiasThreshold = 57600

// Tiresias is Tiresias+TunedJobs (spec §6.3): a discretised two-queue
// least-attained-service scheduler with gang scheduling at the workload's
// width and batch size, backfilling and most-free-node placement.
type Tiresias struct {
	q0, q1    []*Job
	running   map[*Job]bool
	known     map[*Job]bool
	executed  map[*Job]int
	lastCheck map[*Job]int
}

// NewTiresias returns the policy.
func NewTiresias() *Tiresias {
	return &Tiresias{running: map[*Job]bool{}, known: map[*Job]bool{}, executed: map[*Job]int{}, lastCheck: map[*Job]int{}}
}

// Name implements Policy.
func (*Tiresias) Name() string { return "tiresias" }

// SetupTiresias fixes a job's width and batch size to the trace's (§3.1).
func SetupTiresias(j *Job) { j.TargetReplicas, j.TargetBatch = j.Replicas, j.BatchSize }

// Allocate implements Policy.
func (t *Tiresias) Allocate(now int, active []*Job, cl *Cluster) ([][]int, error) {
	in := make(map[*Job]int, len(active))
	for i, j := range active {
		in[j] = i
	}
	keepIn := func(q []*Job) []*Job {
		out := q[:0]
		for _, j := range q {
			if _, ok := in[j]; ok {
				out = append(out, j)
			}
		}
		return out
	}
	t.q0, t.q1 = keepIn(t.q0), keepIn(t.q1)
	for j := range t.known {
		if _, ok := in[j]; !ok {
			delete(t.known, j)
			delete(t.running, j)
		}
	}
	for _, j := range active {
		if !t.known[j] {
			t.known[j] = true
			t.q0 = append(t.q0, j)
		}
	}
	for _, j := range active {
		if t.running[j] {
			t.executed[j] += now - t.lastCheck[j]
			t.lastCheck[j] = now
			if t.executed[j]*j.TargetReplicas >= TiresiasThreshold && removeJob(&t.q0, j) {
				t.q1 = append(t.q1, j)
			}
		} else {
			t.lastCheck[j] = now
		}
	}
	allocs := make([][]int, len(active))
	for i, j := range active {
		allocs[i] = j.Alloc
	}
	gpus := cl.GPUs
	for _, q := range [][]*Job{t.q0, t.q1} {
		for _, j := range q {
			if j.TargetReplicas <= gpus {
				t.running[j] = true
				gpus -= j.TargetReplicas
			} else {
				t.running[j] = false
				allocs[in[j]] = nil
			}
		}
	}
	free := freeGPUs(cl, allocs)
	for _, q := range [][]*Job{t.q0, t.q1} {
		for _, j := range q {
			if t.running[j] && len(allocs[in[j]]) == 0 {
				if allocs[in[j]] = placeMostFree(free, j.TargetReplicas); allocs[in[j]] == nil {
					return nil, fmt.Errorf("tiresias: no room for job %s", j.Name)
				}
			}
		}
	}
	return allocs, nil
}

func removeJob(q *[]*Job, j *Job) bool {
	for i, x := range *q {
		if x == j {
			*q = append((*q)[:i], (*q)[i+1:]...)
			return true
		}
	}
	return false
}
