package policy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// DefaultTiresiasThreshold is the attained service, in GPU-seconds, at
// which Tiresias+TunedJobs demotes a job from the first to the second
// queue: 16 GPU-hours (the Pollux artifact's tiresias.py, POLLUX.md §6.3).
const DefaultTiresiasThreshold = 57600

// maxTiresiasQueues bounds the number of queues a configuration may ask for.
const maxTiresiasQueues = 16

// TiresiasConfig configures the Tiresias policy.
type TiresiasConfig struct {
	// Thresholds are the attained services, GPU-seconds, at which a job
	// moves down from queue k to queue k+1; strictly increasing and
	// positive. len(Thresholds)+1 queues. Nil means the artifact's two
	// queues split at DefaultTiresiasThreshold.
	Thresholds []float64 `json:"thresholds_gpu_seconds"`
}

// Validate checks the thresholds.
func (c TiresiasConfig) Validate() error {
	if len(c.Thresholds) >= maxTiresiasQueues {
		return fmt.Errorf("tiresias: %d thresholds; at most %d queues", len(c.Thresholds), maxTiresiasQueues)
	}
	for k, t := range c.Thresholds {
		if math.IsNaN(t) || math.IsInf(t, 0) || t <= 0 || (k > 0 && t <= c.Thresholds[k-1]) {
			return fmt.Errorf("tiresias: thresholds_gpu_seconds %v must be positive, finite and strictly increasing", c.Thresholds)
		}
	}
	return nil
}

// Tiresias is the discretised two-dimensional least-attained-service
// scheduler of Tiresias (Gu et al., NSDI'19) as the Pollux artifact runs it,
// Tiresias+TunedJobs (POLLUX.md §6.3): a job's attained service is its gang
// width times the wall time it has been granted its GPUs; it starts in
// queue 0 and moves to the end of the next queue when its service reaches
// that queue's threshold. Each round the policy walks the queues in order,
// each first-in first-out, and grants every job whose gang fits the GPUs
// still free: later, smaller jobs fill what wider ones leave (backfilling),
// and a running job that no longer fits is preempted. Starvation handling
// is off, as in the artifact. The policy needs no throughput, forecast or
// declared schedule.
//
// Service is counted from the coordinator's grants (the snapshot clock),
// never from what a job reports, so a job cannot raise its own priority by
// under-reporting; a granted round counts in full even when the job spent
// it restarting, as the artifact counts its restart delay.
type Tiresias struct {
	cfg  TiresiasConfig
	jobs map[string]*tiresiasJob
	next int64 // entry counter: FIFO order within a queue
}

type tiresiasJob struct {
	queue     int
	entry     int64   // when the job entered its queue (the counter)
	executed  float64 // wall seconds granted
	running   bool    // granted by the previous plan
	lastCheck float64 // snapshot time of the last accounting
}

// NewTiresias returns the policy; cfg must be valid.
func NewTiresias(cfg TiresiasConfig) (*Tiresias, error) {
	if cfg.Thresholds == nil {
		cfg.Thresholds = []float64{DefaultTiresiasThreshold}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Thresholds = slices.Clone(cfg.Thresholds)
	return &Tiresias{cfg: cfg, jobs: map[string]*tiresiasJob{}}, nil
}

func init() {
	Register("tiresias", func(o Options) (Policy, error) {
		var cfg TiresiasConfig
		switch c := o.Config.(type) {
		case nil:
		case TiresiasConfig:
			cfg = c
		case json.RawMessage:
			dec := json.NewDecoder(bytes.NewReader(c))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				return nil, fmt.Errorf("tiresias: config: %w", err)
			}
		default:
			return nil, fmt.Errorf("tiresias: unsupported config type %T", o.Config)
		}
		return NewTiresias(cfg)
	}, "2das", "las2d")
}

// Name is "tiresias".
func (*Tiresias) Name() string { return "tiresias" }

// Admit appends the job to queue 0, waiting.
func (t *Tiresias) Admit(j *Job) {
	if _, ok := t.jobs[j.ID]; ok {
		return
	}
	t.jobs[j.ID] = &tiresiasJob{entry: t.next, lastCheck: j.AdmitTime}
	t.next++
}

// Remove drops a job.
func (t *Tiresias) Remove(id string) { delete(t.jobs, id) }

// Update keeps the job's queue, place and attained service: Tiresias reads
// only its gang width, which an update does not change.
func (*Tiresias) Update(*Job) {}

// Observe ignores reports: service is the granted time.
func (*Tiresias) Observe(string, float64, int64) {}

// Fail ignores failures: the GPUs were held all the same.
func (*Tiresias) Fail(string) {}

// Allocate accounts the service of the jobs that ran since the last call,
// demotes those past a threshold, and grants gangs in queue order.
func (t *Tiresias) Allocate(s *Snapshot) (*Plan, error) {
	if err := checkWidths(s); err != nil {
		return nil, err
	}
	order := make([]int, len(s.Jobs))
	for i, j := range s.Jobs {
		tj := t.jobs[j.ID]
		if tj == nil { // not announced: admitted now, as Admit would
			t.Admit(j)
			tj = t.jobs[j.ID]
		}
		if tj.running {
			tj.executed += max(0, s.Now-tj.lastCheck)
		}
		tj.lastCheck = s.Now
		for tj.queue < len(t.cfg.Thresholds) && tj.executed*float64(j.Workers) >= t.cfg.Thresholds[tj.queue] {
			tj.queue++
			tj.entry = t.next
			t.next++
		}
		order[i] = i
	}
	in := make(map[string]bool, len(s.Jobs))
	for _, j := range s.Jobs {
		in[j.ID] = true
	}
	for id, tj := range t.jobs { // left out of this snapshot: holds no GPUs from now on
		if !in[id] {
			if tj.running {
				tj.executed += max(0, s.Now-tj.lastCheck)
			}
			tj.running, tj.lastCheck = false, s.Now
		}
	}
	slices.SortFunc(order, func(a, b int) int {
		ja, jb := t.jobs[s.Jobs[a].ID], t.jobs[s.Jobs[b].ID]
		return cmp.Or(cmp.Compare(ja.queue, jb.queue), cmp.Compare(ja.entry, jb.entry))
	})
	plan := &Plan{Round: s.Round, Solved: true, Explain: make([]Explanation, len(s.Jobs))}
	free := s.GPUs
	for _, i := range order {
		j := s.Jobs[i]
		tj := t.jobs[j.ID]
		service := tj.executed * float64(j.Workers)
		e := Explanation{Job: j.ID}
		if j.Workers <= free {
			free -= j.Workers
			e.Run, e.Share = true, 1
			plan.Run = append(plan.Run, j.ID)
		} else {
			e.Reason = fmt.Sprintf("queue %d (%.0f GPU-s attained): gang of %d GPUs does not fit in the %d left by earlier jobs",
				tj.queue, service, j.Workers, free)
		}
		tj.running = e.Run
		plan.Explain[i] = e
	}
	return plan, nil
}
