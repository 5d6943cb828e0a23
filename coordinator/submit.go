package coordinator

import (
	"fmt"
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// Submitted jobs (docs/agent.md). `shockwave submit` stores a command and a
// gang width in the log; Core registers the job at once with a placeholder
// registration, so that it is scheduled before any process of it exists (a
// node agent starts the process only where it is granted). When the
// process registers through the SDK, its registration replaces the
// placeholder (adopt). Submitted jobs are never marked lost: nothing runs
// while they wait, and while they run their node agent answers for them.

// Cancelled is the state of a job ended by `shockwave cancel`.
const Cancelled JobState = "cancelled"

// placeholderModel is the model family of a submitted job until its
// process registers: policies read such a job, until it runs, as one of
// unknown length (policy.Job.LengthUnknown), not as the one step the
// placeholder declares.
const placeholderModel = policy.PlaceholderModel

// Submit registers a submitted job (s.Job must be set). The placeholder
// registration declares the gang width and nothing else; policies treat
// the job as one of unknown length until its process registers.
func (c *Core) Submit(now float64, s *protocol.Submit) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Job == "" {
		return fmt.Errorf("coordinator: submission without a job id")
	}
	r := &protocol.Register{V: protocol.Version, Job: s.Job, Name: s.Name, Model: placeholderModel,
		Workers: s.Workers, BatchSize: 1, DatasetSize: 1, TotalSteps: 1}
	if err := c.Register(now, r); err != nil {
		return err
	}
	c.jobs[s.Job].managed = true
	return nil
}

// adopt accepts the first registration of a submitted job's process: its
// parameters replace the placeholder's (the gang width stays the
// submission's). A job the policy tracks is updated there (policy.Updater),
// or removed and admitted again.
func (c *Core) adopt(now float64, j *job, r *protocol.Register) error {
	if err := c.advance(now); err != nil {
		return err
	}
	j.adopted, j.lastHeard = true, now
	j.ident = identityOf(r)
	v := &j.view
	v.Model, v.Mode = r.Model, r.Mode
	v.InitialBatchSize, v.BatchSize, v.DatasetSize = r.BatchSize, r.BatchSize, r.DatasetSize
	v.Throughput, v.TotalSteps, v.IsolatedSeconds = r.Throughput, r.TotalSteps, r.IsolatedSeconds
	if r.Priority > 0 {
		v.Priority = r.Priority
	}
	v.PlannedBatchSizes, v.PlannedEpochSeconds = nil, nil
	if r.Schedule != nil {
		v.PlannedBatchSizes = slices.Clone(r.Schedule.BatchSizes)
		v.PlannedEpochSeconds = slices.Clone(r.Schedule.EpochSeconds)
	}
	if c.cfg.RuntimeLimitFactor > 0 && r.IsolatedSeconds > 0 {
		j.limit = math.Trunc(math.Trunc(r.IsolatedSeconds) * c.cfg.RuntimeLimitFactor)
	}
	if j.state == Active {
		c.update(v)
	}
	return nil
}

// EndJob ends a pending or active job with state s (Failed or Cancelled)
// and reason. For an active job it returns the EXIT lease to publish.
func (c *Core) EndJob(now float64, id string, s JobState, reason string) (*protocol.Lease, error) {
	j, ok := c.jobs[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrUnknownJob, id)
	case j.state != Active && j.state != Pending && j.state != Lost:
		return nil, fmt.Errorf("%w: %s is %s", ErrJobEnded, id, j.state)
	}
	if err := c.advance(now); err != nil {
		return nil, err
	}
	if j.state != Active {
		c.drop(j, s, reason)
		return nil, nil
	}
	c.end(j, s, reason)
	l := c.lease(j, protocol.Exit)
	l.Reason = reason
	j.leaseRound, j.workers = -1, nil
	return &l, nil
}

// Unheard reports whether id is a submitted job no process of which has
// registered yet.
func (c *Core) Unheard(id string) bool {
	j, ok := c.jobs[id]
	return ok && j.managed && !j.adopted
}

// Managed reports whether id is a submitted job, and its state.
func (c *Core) Managed(id string) (JobState, bool) {
	j, ok := c.jobs[id]
	if !ok || !j.managed {
		return "", false
	}
	return j.state, true
}

// NoteExit records a submitted job's last failed exit, shown by status.
func (c *Core) NoteExit(id, reason string) {
	if j, ok := c.jobs[id]; ok && j.managed {
		j.reason = reason
	}
}
