package coordinator

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// Errors returned by Core for inputs it rejects. A rejected input changes no
// state.
var (
	ErrUnknownJob   = errors.New("coordinator: unknown job")
	ErrDuplicateJob = errors.New("coordinator: job already registered")
	ErrJobEnded     = errors.New("coordinator: job already ended")
	ErrNotAdmitted  = errors.New("coordinator: job not admitted yet")
	ErrOutOfOrder   = errors.New("coordinator: event sequence number not increasing")
	ErrClock        = errors.New("coordinator: time went backwards")
	ErrTooWide      = errors.New("coordinator: gang wider than the cluster")
)

// JobState is a job's lifecycle state.
type JobState string

// Job states.
const (
	Pending   JobState = "pending"   // registered, admitted at the next round
	Active    JobState = "active"    // competes for GPUs
	Completed JobState = "completed" // reported done
	Failed    JobState = "failed"    // ended by the coordinator after failed leases
	Expired   JobState = "expired"   // ended by the run-time limit
)

// Ended reports a job the coordinator stopped tracking.
type Ended struct {
	Job    string   `json:"job"`
	State  JobState `json:"state"`
	Time   float64  `json:"time"`
	Reason string   `json:"reason"`
}

// Round is the output of one tick.
type Round struct {
	Index  int              `json:"index"`
	Start  float64          `json:"start"`
	Active int              `json:"active"` // active jobs at scheduling time
	Plan   *policy.Plan     `json:"plan"`
	Leases []protocol.Lease `json:"leases"` // RUN, SUSPEND and EXIT, in that order
	Ended  []Ended          `json:"ended,omitempty"`
	Lost   []Ended          `json:"lost,omitempty"` // jobs marked lost at this tick (lifecycle.go)
	// Covered names the jobs whose RUN lease in Leases need not be sent:
	// the lease sent to them in an earlier round still covers this one
	// (Config.LeaseRounds > 1, leases.go). Their lease here carries that
	// earlier lease's expiry.
	Covered []string `json:"covered,omitempty"`
}

type job struct {
	view     policy.Job
	state    JobState
	lastSeq  uint64
	failures int
	limit    float64 // run-time limit in seconds, 0 when none

	leaseRound   int // round of the most recent RUN lease, -1 if none
	leaseSteps   int64
	leaseElapsed float64
	leaseBatch   int
	// GPU ids of the most recent RUN lease, and the same grant per node
	// (place.go). Both are replaced, never changed in place: status rows
	// share them (status.go).
	workers     []int
	devices     []protocol.NodeDevices
	next        []protocol.NodeDevices // this tick's grant while placing
	void        string                 // why the current lease became void (nodes.go)
	runUntil    float64                // the latest expiry of the RUN leases sent (leases.go)
	resuspended int                    // 1 + the round of the last SUSPEND sent again (leases.go), 0 if none

	node    string // resident process's node ("" when none)
	visible []int  // its visible local devices, sorted (empty: all)

	ident     identity        // the registration's defining parameters (lifecycle.go)
	lastHeard float64         // time of the registration or the last accepted event
	readmit   bool            // pending again after being lost: keeps its admission time
	prepared  policy.Prepared // what the policy built ahead of the admission (policy.Preparer), until then

	// Round-boundary scratch (tick.go): 1 + the round whose snapshot held
	// the job (0: none yet), and the mark of the set of jobs being built
	// (Core.newMark).
	inSnapshot int
	mark       uint64

	// Submitted jobs (submit.go): run by node agents, never marked lost.
	managed bool
	adopted bool   // its process registered: the registration replaced the placeholder
	reason  string // why it ended, or its last failed exit

	// retiredAt orders the ended and lost jobs for retention.go: the
	// Core's retireSeq when the job ended or was lost, 0 while it lives.
	retiredAt uint64
}

// Core is the coordinator's deterministic state machine. It is not safe for
// concurrent use.
type Core struct {
	cfg     Config
	pol     policy.Policy
	jobs    map[string]*job
	pending []*job
	active  []*job // admission order
	nextSeq int
	round   int // index of the next round to schedule
	now     float64
	plan    *policy.Plan
	ended   []Ended // since the previous tick
	life    liveness

	open   *OpenRound   // the round between BeginTick and EndTick (pipeline.go)
	frozen []policy.Job // the open round's copies of the jobs' views, reused
	later  []policyCall // policy calls held back while a round is open
	lent   bool         // the policy's state is being saved (snapshot_core.go)

	nodes   []topology.Node // current membership, topology order
	nodeAt  map[string]int  // node name → position in nodes
	total   int             // GPUs of nodes
	dynamic bool            // membership changes (nodes.go)

	marks uint64 // the last mark handed out (newMark)

	retention // the ended and lost jobs, in the order they left (retention.go)
}

// newMark returns a value no job's mark holds yet: a set of jobs, such as
// a round's plan, is marked by setting their mark to it, without a map of
// thousands a round. One set is marked at a time.
func (c *Core) newMark() uint64 {
	c.marks++
	return c.marks
}

// NewCore returns a Core with no jobs, scheduling with policy p.
func NewCore(cfg Config, p policy.Policy) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("coordinator: nil policy")
	}
	c := &Core{cfg: cfg, pol: p, jobs: map[string]*job{}, dynamic: cfg.Dynamic}
	c.nodes = slices.Clone(cfg.Cluster.Nodes)
	c.indexNodes()
	c.total = cfg.Cluster.GPUs()
	return c, nil
}

// Config returns the validated configuration.
func (c *Core) Config() Config { return c.cfg }

// NextRound is the index of the round the next Tick schedules.
func (c *Core) NextRound() int { return c.round }

// LastPlan is the plan of the most recent round, or nil.
func (c *Core) LastPlan() *policy.Plan { return c.plan }

func (c *Core) advance(now float64) error {
	if math.IsNaN(now) || math.IsInf(now, 0) || now < 0 {
		return fmt.Errorf("coordinator: invalid time %g", now)
	}
	if now < c.now {
		return fmt.Errorf("%w: %g after %g", ErrClock, now, c.now)
	}
	c.now = now
	return nil
}

// Register records a new job. It joins the active set at the next Tick.
func (c *Core) Register(now float64, r *protocol.Register) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if _, dup := c.jobs[r.Job]; dup {
		return fmt.Errorf("%w: %s", ErrDuplicateJob, r.Job)
	}
	if !c.dynamic && r.Workers > c.total {
		return fmt.Errorf("%w: job %s needs %d GPUs, the cluster has %d", ErrTooWide, r.Job, r.Workers, c.total)
	}
	if err := c.checkResident(r.Job, r.Workers, r.Node, visibleSet(r.Visible)); err != nil {
		return err
	}
	if err := c.advance(now); err != nil {
		return err
	}
	j := &job{state: Pending, leaseRound: -1, ident: identityOf(r), lastHeard: now, node: r.Node, visible: visibleSet(r.Visible)}
	v := &j.view
	v.ID, v.Model, v.Mode, v.Workers = r.Job, r.Model, r.Mode, r.Workers
	v.Priority = r.Priority
	if v.Priority == 0 {
		v.Priority = 1
	}
	v.SubmitTime = r.SubmitTime
	if r.SubmitTime == 0 {
		v.SubmitTime = now
	}
	v.InitialBatchSize, v.BatchSize, v.DatasetSize = r.BatchSize, r.BatchSize, r.DatasetSize
	v.Throughput, v.TotalSteps = r.Throughput, r.TotalSteps
	v.IsolatedSeconds, v.LastRun = r.IsolatedSeconds, -1
	if r.Schedule != nil {
		v.PlannedBatchSizes = slices.Clone(r.Schedule.BatchSizes)
		v.PlannedEpochSeconds = slices.Clone(r.Schedule.EpochSeconds)
	}
	if c.cfg.RuntimeLimitFactor > 0 && r.IsolatedSeconds > 0 {
		j.limit = math.Trunc(math.Trunc(r.IsolatedSeconds) * c.cfg.RuntimeLimitFactor)
	}
	c.jobs[r.Job] = j
	c.pending = append(c.pending, j)
	if p, ok := c.pol.(policy.Preparer); ok && !c.holding() {
		j.prepared = p.Prepare(v) // the next boundary's admission does the rest
	}
	return nil
}

// Apply folds one job event into the job's state. When the event makes the
// coordinator end the job (the run-time limit), it returns the EXIT lease.
func (c *Core) Apply(now float64, e *protocol.Event) (*protocol.Lease, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	j, ok := c.jobs[e.Job]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrUnknownJob, e.Job)
	case j.state == Pending:
		return nil, fmt.Errorf("%w: %s", ErrNotAdmitted, e.Job)
	case j.state != Active:
		return nil, fmt.Errorf("%w: %s is %s", ErrJobEnded, e.Job, j.state)
	case e.Seq <= j.lastSeq:
		return nil, fmt.Errorf("%w: job %s sent seq %d after %d", ErrOutOfOrder, e.Job, e.Seq, j.lastSeq)
	}
	if e.Seq-j.lastSeq > protocol.MaxSeqGap {
		return nil, fmt.Errorf("%w: job %s jumped from seq %d to %d (more than 2^32 ahead)", ErrOutOfOrder, e.Job, j.lastSeq, e.Seq)
	}
	if err := c.advance(now); err != nil {
		return nil, err
	}
	j.lastSeq, j.lastHeard = e.Seq, now
	switch e.Type {
	case protocol.EventDone:
		c.end(j, Completed, "reported done")
		return nil, nil
	case protocol.EventBatchSize:
		c.setState(j, e)
		return nil, nil
	}
	return c.progress(j, e), nil
}

func (c *Core) setState(j *job, e *protocol.Event) {
	v := &j.view
	v.StepsDone, v.TotalSteps, v.Epoch, v.BatchSize = e.StepsDone, e.TotalSteps, e.Epoch, e.BatchSize
	if e.Throughput > 0 {
		v.Throughput = e.Throughput
	}
}

// progress applies a progress event: a successful slice of execution when
// it reports any steps or time (spec §3.3 step 2.5).
func (c *Core) progress(j *job, e *protocol.Event) *protocol.Lease {
	c.setState(j, e)
	if e.Steps <= 0 && e.Elapsed <= 0 {
		return nil // a heartbeat
	}
	v := &j.view
	v.RunTime += e.Elapsed
	j.failures = 0
	j.leaseSteps += e.Steps
	j.leaseElapsed += e.Elapsed
	j.leaseBatch = e.BatchSize
	c.measure(j)
	c.observe(v.ID, e.Elapsed, e.Steps)
	if j.limit > 0 && v.RunTime > j.limit {
		reason := fmt.Sprintf("run time %.0fs exceeds the limit %.0fs", v.RunTime, j.limit)
		c.end(j, Expired, reason)
		l := c.lease(j, protocol.Exit)
		l.Reason = reason
		return &l
	}
	return c.resuspend(j, e, c.now)
}

// measure records the throughput of the current lease under the index of
// the round whose start folds it in (spec §3.3 step 2.5, §4.2).
func (c *Core) measure(j *job) {
	m := policy.Measurement{Round: c.eventRound(), BatchSize: j.leaseBatch}
	if j.leaseElapsed > 0 {
		m.Throughput = float64(j.leaseSteps) / j.leaseElapsed
	}
	ms := j.view.Measurements
	if n := len(ms); n > 0 && ms[n-1].Round == m.Round {
		ms[n-1] = m
		return
	}
	j.view.Measurements = append(ms, m)
}

func (c *Core) end(j *job, s JobState, reason string) {
	j.state, j.reason = s, reason
	if i := slices.Index(c.active, j); i >= 0 {
		c.active = slices.Delete(c.active, i, i+1)
	}
	if s == Completed {
		c.complete(&j.view)
	} else {
		c.remove(j.view.ID)
	}
	j.forget()
	c.ended = append(c.ended, Ended{Job: j.view.ID, State: s, Time: c.now, Reason: reason})
	c.retire(j)
}

// forget drops what no one reads once a job ended — its measurements and
// its declared schedule (an ended job cannot register again, its status
// row shows neither) — so that the state and its snapshots stay bounded by
// the live jobs: a completed job keeps a few hundred bytes, not the
// per-epoch arrays of its schedule. The policy had its view before.
func (j *job) forget() {
	j.view.Measurements, j.view.PlannedBatchSizes, j.view.PlannedEpochSeconds = nil, nil, nil
	j.prepared = nil
}

// lease is a lease issued now, outside a round boundary's placement: it
// belongs to the round events are folded into.
func (c *Core) lease(j *job, a protocol.Action) protocol.Lease {
	return c.leaseAt(j, a, c.eventRound(), c.now)
}

func (c *Core) leaseAt(j *job, a protocol.Action, round int, start float64) protocol.Lease {
	return protocol.Lease{
		V: protocol.Version, Job: j.view.ID, Round: round, Action: a,
		Start: start, Expiry: start + c.cfg.RoundSeconds + c.cfg.LeaseGraceSeconds,
	}
}

// visibleSet is a registration's visible devices sorted without repeats.
func visibleSet(v []int) []int {
	if len(v) == 0 {
		return nil
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return slices.Compact(s)
}
