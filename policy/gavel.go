package policy

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// DefaultMinResetSeconds is the shortest time between two re-allocations of
// the Gavel round mechanism (the original's constructor default
// minimum_time_between_allocation_resets, spec §3.7).
const DefaultMinResetSeconds = 1000

// GavelRound is the round mechanism of Gavel (spec §3.7) that every baseline
// shares: an Allocator fixes each job's long-run time fraction x_i, and each
// round the mechanism dispatches the jobs that are furthest below their share
// (priority x_i / f_i, where f_i is the fraction of worker time the job
// received since the last reset), greedily, skipping gangs that do not fit.
//
// Re-allocation happens only when something changed (an arrival, a departure,
// a failed lease or the cluster's GPU count) and at least MinResetSeconds have passed since the last
// reset, or the last reset was at time 0. A job admitted after the last reset
// has no allocation and does not run until the next reset; this is the
// original's behaviour and is what the released baseline results measure.
//
// With ReallocateOnChange (a live coordinator's setting), a change also
// re-allocates at once, before MinResetSeconds, when the round's dispatch
// would leave GPUs idle while a job that fits them waits (typically a job
// that registered after the last reset): on a live cluster the original
// rule leaves such a job beside idle GPUs for up to 1,000 s. The setting is
// configuration, not state: it adds nothing to what GavelRound keeps.
type GavelRound struct {
	alloc              Allocator
	MinResetSeconds    float64
	ReallocateOnChange bool

	x          map[string]float64 // allocation of jobs that have one
	jobTime    map[string]float64 // seconds run since the last reset, starting at Δ/2
	deficit    map[string]float64
	workerTime float64
	lastReset  float64
	update     bool
	gpus       int // GPUs of the previous Allocate: a change re-allocates
}

// NewGavelRound wraps an allocator into a round-based policy.
func NewGavelRound(a Allocator) *GavelRound {
	return &GavelRound{
		alloc:           a,
		MinResetSeconds: DefaultMinResetSeconds,
		x:               map[string]float64{},
		jobTime:         map[string]float64{},
		deficit:         map[string]float64{},
		update:          true,
	}
}

// Name is the allocator's name.
func (g *GavelRound) Name() string { return g.alloc.Name() }

// Admit starts a job with no allocation and a zero deficit; its job time is
// set to Δ/2 at the next Allocate (spec §3.3 step 5).
func (g *GavelRound) Admit(j *Job) {
	g.deficit[j.ID] = 0
	delete(g.jobTime, j.ID)
	g.update = true
}

// Update keeps the job's allocation, deficit and time since the last
// reset, and marks the allocation for an update: the next reset
// allocates with the job's new parameters.
func (g *GavelRound) Update(*Job) { g.update = true }

// Remove drops a job. Its time stays in the worker total (spec §3.7: a
// completed job's time is not subtracted).
func (g *GavelRound) Remove(id string) {
	delete(g.x, id)
	delete(g.jobTime, id)
	delete(g.deficit, id)
	g.alloc.Forget(id)
	g.update = true
}

// Observe adds a successful slice of execution to the job's and the
// cluster's time since the last reset.
func (g *GavelRound) Observe(id string, elapsed float64, _ int64) {
	g.jobTime[id] += elapsed
	g.workerTime += elapsed
}

// Fail marks the allocation for an update.
func (g *GavelRound) Fail(string) { g.update = true }

// Allocate resets when due, then ranks the jobs and fills the GPUs.
func (g *GavelRound) Allocate(s *Snapshot) (*Plan, error) {
	s = assumeUnmeasured(s)
	half := s.RoundSeconds / 2
	for _, j := range s.Jobs {
		if _, ok := g.jobTime[j.ID]; !ok {
			g.jobTime[j.ID] = half
		}
	}
	plan := &Plan{Round: s.Round}
	if s.GPUs != g.gpus {
		g.update, g.gpus = true, s.GPUs // nodes joined or left
	}
	if g.update && (s.Now-g.lastReset >= g.MinResetSeconds || g.lastReset == 0) {
		if err := g.reset(s, half); err != nil {
			return nil, err
		}
		plan.Solved = true
	}
	g.dispatch(s, plan)
	if g.update && g.ReallocateOnChange && idleWhileWaiting(s, plan) {
		if err := g.reset(s, half); err != nil {
			return nil, err
		}
		plan = &Plan{Round: s.Round, Solved: true,
			Note: "re-allocated on change: jobs or GPUs came or went and GPUs would have stayed idle"}
		g.dispatch(s, plan)
	}
	return plan, nil
}

// idleWhileWaiting reports whether plan leaves GPUs idle while a job with a
// known rate that would fit them does not run.
func idleWhileWaiting(s *Snapshot, plan *Plan) bool {
	idle := s.GPUs
	for i, e := range plan.Explain {
		if e.Run {
			idle -= s.Jobs[i].Workers
		}
	}
	if idle <= 0 {
		return false
	}
	for i, e := range plan.Explain {
		if j := s.Jobs[i]; !e.Run && j.Throughput > 0 && j.Workers <= idle {
			return true
		}
	}
	return false
}

// reset folds the time each job received into its deficit and re-allocates.
func (g *GavelRound) reset(s *Snapshot, half float64) error {
	elapsed := s.Now - g.lastReset
	g.workerTime = 0
	for _, j := range s.Jobs {
		owed := 0.0
		if x, ok := g.x[j.ID]; ok {
			owed = x * elapsed
		}
		g.deficit[j.ID] += owed - (g.jobTime[j.ID] - half)
		g.jobTime[j.ID] = half
		g.workerTime += half
	}
	g.lastReset = s.Now
	x, err := g.alloc.Allocate(s)
	if err != nil {
		return fmt.Errorf("policy %s: %w", g.alloc.Name(), err)
	}
	if len(x) != len(s.Jobs) {
		return fmt.Errorf("policy %s: allocator returned %d shares for %d jobs", g.alloc.Name(), len(x), len(s.Jobs))
	}
	clear(g.x)
	for i, j := range s.Jobs {
		g.x[j.ID] = x[i]
	}
	g.update = false
	return nil
}

type gavelRank struct {
	x        float64
	hasAlloc bool
	priority float64
	deficit  float64
}

// dispatch ranks jobs by (priority, deficit, x), descending and stable in
// admission order, and walks them filling GPUs (spec §3.7 steps 2-3).
func (g *GavelRound) dispatch(s *Snapshot, plan *Plan) {
	ranks := make([]gavelRank, len(s.Jobs))
	order := make([]int, len(s.Jobs))
	for i, j := range s.Jobs {
		r := gavelRank{deficit: g.deficit[j.ID]}
		r.x, r.hasAlloc = g.x[j.ID]
		r.priority = g.priority(j, r.x, r.hasAlloc)
		ranks[i], order[i] = r, i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ra, rb := &ranks[order[a]], &ranks[order[b]]
		if ra.priority != rb.priority {
			return ra.priority > rb.priority
		}
		if ra.deficit != rb.deficit {
			return ra.deficit > rb.deficit
		}
		return ra.x > rb.x
	})
	plan.Explain = make([]Explanation, len(s.Jobs))
	free := s.GPUs
	for _, i := range order {
		j, r := s.Jobs[i], &ranks[i]
		e := Explanation{Job: j.ID, Share: r.x, Priority: r.priority}
		switch {
		case free == 0:
			e.Reason = "all GPUs taken by jobs further below their share"
		case j.Throughput <= 0:
			e.Reason = "throughput unknown or zero"
		case j.Workers > free:
			e.Reason = fmt.Sprintf("gang of %d GPUs does not fit in the %d left", j.Workers, free)
		case !r.hasAlloc:
			// The walk reserves its GPUs, but a job without an allocation
			// is not dispatched (spec §3.7 step 3.3).
			free -= j.Workers
			e.Reason = "no allocation yet: admitted after the last re-allocation"
		default:
			free -= j.Workers
			e.Run = true
			plan.Run = append(plan.Run, j.ID)
		}
		plan.Explain[i] = e
	}
}

// priority is x_i / f_i with f_i the job's fraction of worker time since the
// last reset (spec §3.7 step 2).
func (g *GavelRound) priority(j *Job, x float64, hasAlloc bool) float64 {
	if !hasAlloc || x == 0 || j.Throughput == 0 {
		return 0
	}
	f := 0.0
	if g.workerTime != 0 {
		f = g.jobTime[j.ID] / g.workerTime
	}
	if f > 0 {
		return x / f
	}
	return x * 1e9
}

// unmeasuredThroughput is the rate, in steps per second, the baselines
// assume for a job that declared no throughput and has not run yet: a live
// job learns its rate only by running, and the allocators would otherwise
// never give it a share (the original's traces always declare one).
const unmeasuredThroughput = 1

// assumeUnmeasured returns s, or a copy in which every job with no
// declared or measured throughput runs at unmeasuredThroughput, and every
// job of unknown length (Job.LengthUnknown) has as many steps left as a
// typical job has seconds left (unknownSeconds) at that rate, not the one
// step its placeholder declares.
func assumeUnmeasured(s *Snapshot) *Snapshot {
	var out *Snapshot
	typical := -1.0 // unknownSeconds, once needed
	for i, j := range s.Jobs {
		unknown := j.LengthUnknown()
		if (j.Throughput > 0 || len(j.Measurements) > 0) && !unknown {
			continue
		}
		if out == nil {
			c := *s
			c.Jobs = slices.Clone(s.Jobs)
			out = &c
		}
		cj := *j
		if cj.Throughput <= 0 {
			cj.Throughput = unmeasuredThroughput
		}
		if unknown {
			if typical < 0 {
				typical = unknownSeconds(s)
			}
			cj.TotalSteps = max(cj.StepsDone, 0) + int64(math.Ceil(typical*cj.Throughput))
		}
		out.Jobs[i] = &cj
	}
	if out == nil {
		return s
	}
	return out
}

// unknownSeconds is the time a baseline assumes a job of unknown length
// has left: the median of the jobs of known length and rate (remaining
// steps over throughput), or one round when there is none.
func unknownSeconds(s *Snapshot) float64 {
	var left []float64
	for _, j := range s.Jobs {
		if !j.LengthUnknown() && j.Throughput > 0 {
			left = append(left, float64(max(j.RemainingSteps(), 0))/j.Throughput)
		}
	}
	if len(left) == 0 {
		return max(s.RoundSeconds, 1)
	}
	slices.Sort(left)
	return max(left[(len(left)-1)/2], 1)
}
