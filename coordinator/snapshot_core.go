package coordinator

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/shockwave-sched/shockwave/internal/wire"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// Core state serialization, the payload of a snapshot (snapshot.go): every
// field of Core and of its jobs, the last plan, and the policy's own state
// (policy.Stateful). A Core restored into a fresh NewCore of the same
// configuration and policy behaves bit for bit like the original: same
// leases, same plans, for any input that follows.

// coreStateVersion is the version of the Core's state encoding.
const coreStateVersion = 4 // 2: submitted jobs (managed, adopted, reason); 3: leases of several rounds (runUntil, resuspended); 4: retention of ended jobs (retiredAt, retireSeq)

// appendState writes the Core's state to e.
func (c *Core) appendState(e *wire.Encoder) error {
	if c.lent {
		return errors.New("coordinator: cannot snapshot while the policy's state is being saved")
	}
	img, sp, err := c.capture()
	if err != nil {
		return err
	}
	if err := img.append(e); err != nil {
		return err
	}
	e.Blob(sp.MarshalState())
	return nil
}

// coreImage is the Core's state but the policy's at one point, captured
// in little time (the jobs are copied, not encoded) and encoded later,
// possibly on another goroutine while the Core goes on: nothing in it is
// written after capture. The round, plan, lease and grant values it shares
// with the Core are replaced, never changed in place, once made.
type coreImage struct {
	jobs            []jobImage // in map order; append sorts them by id
	pending, active []string
	nextSeq, round  int
	now             float64
	plan            *policy.Plan
	ended, lost     []Ended
	lastTick        float64
	ticked          bool
	nodes           []topology.Node
	total           int
	dynamic         bool
	retireSeq       uint64
	policy          string
	version         int // the encoding's version: 0 is coreStateVersion (others: tests)
}

// jobImage is a job as captured: a shallow copy whose measurements are
// those before the last, shared (never written again), and a copy of the
// last, which measure may still overwrite in place.
type jobImage struct {
	j       job
	last    policy.Measurement
	hasLast bool
}

// capture takes the Core's state but the policy's; the policy's state is
// sp's MarshalState.
func (c *Core) capture() (*coreImage, policy.Stateful, error) {
	if c.open != nil {
		return nil, nil, fmt.Errorf("coordinator: cannot snapshot while round %d is open", c.round)
	}
	sp, ok := c.pol.(policy.Stateful)
	if !ok {
		return nil, nil, fmt.Errorf("coordinator: policy %s cannot save its state", c.pol.Name())
	}
	img := &coreImage{jobs: make([]jobImage, 0, len(c.jobs)),
		pending: jobIDs(c.pending), active: jobIDs(c.active),
		nextSeq: c.nextSeq, round: c.round, now: c.now, plan: c.plan,
		ended: slices.Clone(c.ended), lost: slices.Clone(c.life.lost),
		lastTick: c.life.lastTick, ticked: c.life.ticked,
		nodes: slices.Clone(c.nodes), total: c.total, dynamic: c.dynamic, retireSeq: c.retireSeq, policy: c.pol.Name()}
	for _, j := range c.jobs {
		ji := jobImage{j: *j}
		if ms := j.view.Measurements; len(ms) > 0 {
			n := len(ms)
			ji.j.view.Measurements, ji.last, ji.hasLast = ms[:n-1:n-1], ms[n-1], true
		}
		img.jobs = append(img.jobs, ji)
	}
	return img, sp, nil
}

func jobIDs(js []*job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.view.ID
	}
	return out
}

// append writes the captured state (the Core's part of a snapshot).
func (img *coreImage) append(e *wire.Encoder) error {
	plan, err := planJSON(img.plan) // off the loop, in yielding pieces (yield.go)
	if err != nil {
		return fmt.Errorf("coordinator: snapshot of the last plan: %w", err)
	}
	version := cmp.Or(img.version, coreStateVersion)
	e.Int(version)
	slices.SortFunc(img.jobs, func(a, b jobImage) int { return strings.Compare(a.j.view.ID, b.j.view.ID) })
	e.Len(len(img.jobs))
	for i := range img.jobs {
		if i > 0 && i%jobsPerYield == 0 {
			runtime.Gosched()
		}
		img.jobs[i].append(e, version)
	}
	appendStrs(e, img.pending)
	appendStrs(e, img.active)
	e.Int(img.nextSeq)
	e.Int(img.round)
	e.F64(img.now)
	e.Blob(plan)
	appendEnded(e, img.ended)
	e.F64(img.lastTick)
	e.Bool(img.ticked)
	appendEnded(e, img.lost)
	e.Len(len(img.nodes))
	for _, n := range img.nodes {
		e.Str(n.Name)
		e.Int(n.GPUs)
		e.Str(n.Type)
	}
	e.Int(img.total)
	e.Bool(img.dynamic)
	if version >= 4 {
		e.U64(img.retireSeq)
	}
	e.Str(img.policy)
	return nil
}

// lendPolicy hands the policy's state to a reader on another goroutine
// (the snapshot writer): until returnPolicy the Core holds back its policy
// calls, as while a round is open, and no round begins. It returns the
// Core's own state, captured, to encode anywhere.
func (c *Core) lendPolicy() (img *coreImage, marshal func() []byte, err error) {
	img, sp, err := c.capture()
	if err != nil {
		return nil, nil, err
	}
	c.lent = true
	return img, sp.MarshalState, nil
}

// returnPolicy ends a lendPolicy and makes the calls held back meanwhile.
// While a round is open the calls stay held back: the open round's solve
// makes those from before it (OpenRound.Solve) and EndTick the others.
func (c *Core) returnPolicy() {
	if c.lent {
		c.lent = false
		if c.open == nil {
			c.flushPolicy()
		}
	}
}

// loadState reads a state written by appendState into a fresh Core.
func (c *Core) loadState(d *wire.Decoder) error {
	version := d.Int()
	if d.Err() == nil && (version < 2 || version > coreStateVersion) {
		return fmt.Errorf("coordinator: core state version %d, want 2 to %d", version, coreStateVersion)
	}
	n := d.Len(64)
	c.jobs = make(map[string]*job, n)
	ids := make([]string, 0, n)
	for range n {
		j := &job{}
		j.load(d, version)
		if d.Err() != nil {
			return d.Err()
		}
		if _, dup := c.jobs[j.view.ID]; dup {
			return fmt.Errorf("coordinator: core state: job %s twice", j.view.ID)
		}
		c.jobs[j.view.ID] = j
		ids = append(ids, j.view.ID)
	}
	var err error
	if c.pending, err = c.loadIDs(d, Pending); err != nil {
		return err
	}
	if c.active, err = c.loadIDs(d, Active); err != nil {
		return err
	}
	c.nextSeq, c.round, c.now = d.IntIn(0, math.MaxInt32), d.IntIn(0, math.MaxInt32), d.F64()
	plan := d.Blob()
	c.ended = loadEnded(d)
	c.life.lastTick, c.life.ticked = d.F64(), d.Bool()
	c.life.lost = loadEnded(d)
	c.nodes = make([]topology.Node, d.Len(24))
	for i := range c.nodes {
		c.nodes[i] = topology.Node{Name: d.Str(), GPUs: d.IntIn(0, math.MaxInt32), Type: d.Str()}
	}
	c.total, c.dynamic = d.IntIn(0, math.MaxInt32), d.Bool()
	if version >= 4 {
		c.retireSeq = d.U64()
	}
	c.indexNodes() // nodeAt is derived from nodes
	name, state := d.Str(), d.Blob()
	if d.Err() != nil {
		return d.Err()
	}
	if err := (topology.Cluster{Nodes: c.nodes}).Validate(); err != nil && len(c.nodes) > 0 {
		return fmt.Errorf("coordinator: core state: %w", err)
	}
	if err := c.loadRetention(version, ids); err != nil {
		return err
	}
	if name != c.pol.Name() {
		return fmt.Errorf("coordinator: core state of policy %s, this core runs %s", name, c.pol.Name())
	}
	if err := json.Unmarshal(plan, &c.plan); err != nil {
		return fmt.Errorf("coordinator: core state: last plan: %w", err)
	}
	if err := c.pol.(policy.Stateful).UnmarshalState(state); err != nil {
		return fmt.Errorf("coordinator: core state: %w", err)
	}
	return nil
}

func (ji *jobImage) append(e *wire.Encoder, version int) {
	j := &ji.j
	v := &j.view
	e.Str(v.ID)
	e.Int(v.Seq)
	e.Str(v.Model)
	e.Str(v.Mode)
	e.Int(v.Workers)
	e.F64(v.Priority)
	e.F64(v.SubmitTime)
	e.F64(v.AdmitTime)
	e.Int(v.AdmitRound)
	e.Int(v.InitialBatchSize)
	e.Int(v.BatchSize)
	e.Int(v.DatasetSize)
	e.F64(v.Throughput)
	e.I64(v.StepsDone)
	e.I64(v.TotalSteps)
	e.Int(v.Epoch)
	e.F64(v.RunTime)
	e.Ints(v.PlannedBatchSizes)
	e.F64s(v.PlannedEpochSeconds)
	e.F64(v.IsolatedSeconds)
	e.Bool(v.Measurements != nil || ji.hasLast)
	n := len(v.Measurements)
	if ji.hasLast {
		n++
	}
	e.Len(n)
	for _, m := range v.Measurements {
		appendMeasurement(e, m)
	}
	if ji.hasLast {
		appendMeasurement(e, ji.last)
	}
	e.Int(v.LastRun)
	e.Str(string(j.state))
	e.U64(j.lastSeq)
	e.Int(j.failures)
	e.F64(j.limit)
	e.Int(j.leaseRound)
	e.I64(j.leaseSteps)
	e.F64(j.leaseElapsed)
	e.Int(j.leaseBatch)
	e.Ints(j.workers)
	appendGrant(e, j.devices)
	appendGrant(e, j.next)
	e.Str(j.void)
	e.Str(j.node)
	e.Ints(j.visible)
	id := j.ident
	e.Str(id.model)
	e.Str(id.mode)
	e.Int(id.workers)
	e.Int(id.batch)
	e.Int(id.dataset)
	e.I64(id.steps)
	e.F64(id.isolatedSeconds)
	e.F64(j.lastHeard)
	e.Bool(j.readmit)
	e.Bool(j.managed) // submitted jobs (submit.go)
	e.Bool(j.adopted)
	e.Str(j.reason)
	if version >= 3 {
		e.F64(j.runUntil)
		e.Int(j.resuspended)
	}
	if version >= 4 {
		e.U64(j.retiredAt)
	}
}

func appendMeasurement(e *wire.Encoder, m policy.Measurement) {
	e.Int(m.Round)
	e.F64(m.Throughput)
	e.Int(m.BatchSize)
}

// load reads a job written by state version version. A version-2 state
// comes from a log of one-round leases, whose job.runUntil is only ever
// written: it loads as 0.
func (j *job) load(d *wire.Decoder, version int) {
	v := &j.view
	v.ID, v.Seq, v.Model, v.Mode = d.Str(), d.IntIn(0, math.MaxInt32), d.Str(), d.Str()
	v.Workers, v.Priority = d.IntIn(1, math.MaxInt32), d.F64()
	v.SubmitTime, v.AdmitTime, v.AdmitRound = d.F64(), d.F64(), d.Int()
	v.InitialBatchSize, v.BatchSize, v.DatasetSize = d.Int(), d.Int(), d.Int()
	v.Throughput, v.StepsDone, v.TotalSteps, v.Epoch, v.RunTime = d.F64(), d.I64(), d.I64(), d.Int(), d.F64()
	v.PlannedBatchSizes, v.PlannedEpochSeconds, v.IsolatedSeconds = d.Ints(), d.F64s(), d.F64()
	present := d.Bool()
	n := d.Len(24)
	if present {
		v.Measurements = make([]policy.Measurement, n)
	}
	for i := range n {
		m := policy.Measurement{Round: d.Int(), Throughput: d.F64(), BatchSize: d.Int()}
		if present {
			v.Measurements[i] = m
		}
	}
	v.LastRun = d.Int()
	j.state = JobState(d.Str())
	j.lastSeq, j.failures, j.limit = d.U64(), d.Int(), d.F64()
	j.leaseRound, j.leaseSteps, j.leaseElapsed, j.leaseBatch = d.Int(), d.I64(), d.F64(), d.Int()
	j.workers = d.Ints()
	j.devices, j.next = loadGrant(d), loadGrant(d)
	j.void, j.node, j.visible = d.Str(), d.Str(), d.Ints()
	id := &j.ident
	id.model, id.mode, id.workers, id.batch, id.dataset = d.Str(), d.Str(), d.Int(), d.Int(), d.Int()
	id.steps, id.isolatedSeconds = d.I64(), d.F64()
	j.lastHeard, j.readmit = d.F64(), d.Bool()
	j.managed, j.adopted, j.reason = d.Bool(), d.Bool(), d.Str()
	if version >= 3 {
		j.runUntil, j.resuspended = d.F64(), d.IntIn(0, math.MaxInt32)
	}
	if version >= 4 {
		j.retiredAt = d.U64()
	}
	if d.Err() != nil {
		return
	}
	switch j.state {
	case Pending, Active, Completed, Failed, Expired, Lost, Cancelled:
	default:
		d.Failf("coordinator: core state: job %s in unknown state %q", v.ID, j.state)
	}
	for _, w := range j.workers {
		if w < 0 {
			d.Failf("coordinator: core state: job %s holds GPU %d", v.ID, w)
		}
	}
}

// appendGrant writes a per-node device grant, nil kept apart from empty.
func appendGrant(e *wire.Encoder, g []protocol.NodeDevices) {
	e.Bool(g != nil)
	e.Len(len(g))
	for _, nd := range g {
		e.Str(nd.Node)
		e.Ints(nd.Devices)
	}
}

func loadGrant(d *wire.Decoder) []protocol.NodeDevices {
	present := d.Bool()
	n := d.Len(17)
	var g []protocol.NodeDevices
	if present {
		g = make([]protocol.NodeDevices, 0, n)
	}
	for range n {
		nd := protocol.NodeDevices{Node: d.Str(), Devices: d.Ints()}
		if present {
			g = append(g, nd)
		}
	}
	return g
}

func appendStrs(e *wire.Encoder, ids []string) {
	e.Len(len(ids))
	for _, id := range ids {
		e.Str(id)
	}
}

// loadIDs reads a list of job ids, which must name distinct jobs in state s.
func (c *Core) loadIDs(d *wire.Decoder, s JobState) ([]*job, error) {
	n := d.Len(8)
	out := make([]*job, 0, n)
	for range n {
		id := d.Str()
		j, ok := c.jobs[id]
		if d.Err() != nil {
			return nil, d.Err()
		}
		if !ok || j.state != s || slices.Contains(out, j) {
			return nil, fmt.Errorf("coordinator: core state: %s list names job %q", s, id)
		}
		out = append(out, j)
	}
	return out, d.Err()
}

func appendEnded(e *wire.Encoder, es []Ended) {
	e.Bool(es != nil)
	e.Len(len(es))
	for _, x := range es {
		e.Str(x.Job)
		e.Str(string(x.State))
		e.F64(x.Time)
		e.Str(x.Reason)
	}
}

func loadEnded(d *wire.Decoder) []Ended {
	present := d.Bool()
	n := d.Len(32)
	var out []Ended
	if present {
		out = make([]Ended, 0, n)
	}
	for range n {
		x := Ended{Job: d.Str(), State: JobState(d.Str()), Time: d.F64(), Reason: d.Str()}
		if present {
			out = append(out, x)
		}
	}
	return out
}
