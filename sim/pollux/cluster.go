package pollux

import (
	"errors"
	"fmt"
	"slices"

	"github.com/shockwave-sched/shockwave/topology"
)

// DefaultInterval is the scheduling interval Δ in seconds (spec §5.1).
const DefaultInterval = 60

// Policy allocates GPUs to the active jobs at an interval boundary. It
// returns one allocation per active job, in the order of active (submission
// order): a node index per replica, grouped by node. An allocation equal to
// the job's current Alloc keeps it running; any other change restarts it.
type Policy interface {
	Name() string
	Allocate(now int, active []*Job, cl *Cluster) ([][]int, error)
}

// Cluster is the simulated cluster: its nodes' GPU counts.
type Cluster struct {
	Capacity []int // GPUs per node, node index order
	GPUs     int
}

// NewCluster checks a topology for the Pollux world: the measured traces
// cover at most four GPUs of one job per node, so every node must have
// between one and four GPUs.
func NewCluster(c topology.Cluster) (*Cluster, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cl := &Cluster{}
	for _, n := range c.Nodes {
		if n.GPUs < 1 || n.GPUs > 4 {
			return nil, fmt.Errorf("pollux: node %s has %d GPUs; the measured placements cover 1 to 4 GPUs per node", n.Name, n.GPUs)
		}
		cl.Capacity = append(cl.Capacity, n.GPUs)
		cl.GPUs += n.GPUs
	}
	if len(cl.Capacity) == 0 {
		return nil, errors.New("pollux: empty cluster")
	}
	return cl, nil
}

// Config is one simulation of a Pollux workload.
type Config struct {
	Workload     []WorkloadRow
	Apps         Apps
	Nodes        topology.Cluster // default 16x4
	Interval     int              // Δ seconds, default 60
	Interference float64          // slowdown of co-located distributed jobs (default 0)
	Policy       Policy
	// Setup, when set, configures each job before the run (the policies'
	// fixed batch size or width, spec §3.1).
	Setup func(*Job)
	// OnInterval, when set, sees the time and the active jobs after each
	// allocation.
	OnInterval func(now int, active []*Job)
}

// Run simulates the workload to completion and returns the jobs.
func Run(cfg Config) ([]*Job, error) {
	if cfg.Policy == nil {
		return nil, errors.New("pollux: no policy")
	}
	if len(cfg.Workload) == 0 {
		return nil, errors.New("pollux: no jobs")
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Interval < 1 {
		return nil, fmt.Errorf("pollux: interval %d must be positive", cfg.Interval)
	}
	if cfg.Nodes.Nodes == nil {
		cfg.Nodes = topology.Uniform(16, 4)
	}
	cl, err := NewCluster(cfg.Nodes)
	if err != nil {
		return nil, err
	}
	jobs := make([]*Job, len(cfg.Workload))
	for i, w := range cfg.Workload {
		app, ok := cfg.Apps[w.Application]
		if !ok {
			return nil, fmt.Errorf("pollux: job %s: unknown application %q", w.Name, w.Application)
		}
		jobs[i] = NewJob(w, app)
		if cfg.Setup != nil {
			cfg.Setup(jobs[i])
		}
	}
	slices.SortStableFunc(jobs, func(a, b *Job) int { return a.Submit - b.Submit })
	return jobs, loop(cfg, cl, jobs)
}

// loop is the cluster step of spec §5.2, repeated until every job is done.
func loop(cfg Config, cl *Cluster, jobs []*Job) error {
	now, done := 0, 0
	slow := make([]float64, len(jobs))
	var active []*Job
	for done < len(jobs) {
		interference(cl, jobs, cfg.Interference, slow)
		for i, j := range jobs {
			if err := j.Step(now, cfg.Interval, slow[i]); err != nil {
				return err
			}
		}
		now += cfg.Interval
		active, done = active[:0], 0
		for _, j := range jobs {
			switch {
			case j.Done():
				done++
			case j.Submit <= now:
				active = append(active, j)
			}
		}
		if len(active) == 0 {
			continue
		}
		allocs, err := cfg.Policy.Allocate(now, active, cl)
		if err != nil {
			return fmt.Errorf("pollux: %s at %d s: %w", cfg.Policy.Name(), now, err)
		}
		if len(allocs) != len(active) {
			return fmt.Errorf("pollux: %s returned %d allocations for %d jobs", cfg.Policy.Name(), len(allocs), len(active))
		}
		if err := checkAllocs(cl, active, allocs); err != nil {
			return fmt.Errorf("pollux: %s at %d s: %w", cfg.Policy.Name(), now, err)
		}
		for i, j := range active {
			if !slices.Equal(j.Alloc, allocs[i]) {
				j.Reallocate(allocs[i])
			}
		}
		if cfg.OnInterval != nil {
			cfg.OnInterval(now, active)
		}
	}
	return nil
}

// checkAllocs rejects allocations that name unknown nodes, overfill a node
// or are not grouped by node.
func checkAllocs(cl *Cluster, active []*Job, allocs [][]int) error {
	used := make([]int, len(cl.Capacity))
	for i, a := range allocs {
		for k, n := range a {
			if n < 0 || n >= len(used) {
				return fmt.Errorf("job %s: node %d does not exist", active[i].Name, n)
			}
			if k > 0 && n != a[k-1] && slices.Contains(a[:k], n) {
				return fmt.Errorf("job %s: allocation %v is not grouped by node", active[i].Name, a)
			}
			used[n]++
			if used[n] > cl.Capacity[n] {
				return fmt.Errorf("node %d: more than its %d GPUs allocated", n, cl.Capacity[n])
			}
		}
	}
	return nil
}

// interference sets each job's slowdown (spec §5.2 step 1): a distributed
// job with a replica on a node that hosts two or more distributed jobs.
func interference(cl *Cluster, jobs []*Job, factor float64, slow []float64) {
	clear(slow)
	if factor == 0 {
		return
	}
	count := make([]int, len(cl.Capacity))
	for _, j := range jobs {
		if j.nodes > 1 && !j.Done() {
			for k, n := range j.Alloc {
				if k == 0 || n != j.Alloc[k-1] {
					count[n]++
				}
			}
		}
	}
	for i, j := range jobs {
		if j.nodes > 1 && !j.Done() {
			for _, n := range j.Alloc {
				if count[n] >= 2 {
					slow[i] = factor
				}
			}
		}
	}
}
