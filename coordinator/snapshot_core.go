package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

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
const coreStateVersion = 2 // 2: submitted jobs (managed, adopted, reason)

// appendState writes the Core's state to e.
func (c *Core) appendState(e *wire.Encoder) error {
	if c.lent {
		return errors.New("coordinator: cannot snapshot while the policy's state is being saved")
	}
	sp, err := c.appendCore(e)
	if err != nil {
		return err
	}
	e.Blob(sp.MarshalState())
	return nil
}

// appendCore writes the Core's state but the policy's, which follows it
// as a blob: the policy's state is sp's MarshalState.
func (c *Core) appendCore(e *wire.Encoder) (policy.Stateful, error) {
	if c.open != nil {
		return nil, fmt.Errorf("coordinator: cannot snapshot while round %d is open", c.round)
	}
	sp, ok := c.pol.(policy.Stateful)
	if !ok {
		return nil, fmt.Errorf("coordinator: policy %s cannot save its state", c.pol.Name())
	}
	plan, err := json.Marshal(c.plan)
	if err != nil {
		return nil, fmt.Errorf("coordinator: snapshot of the last plan: %w", err)
	}
	e.Int(coreStateVersion)
	ids := make([]string, 0, len(c.jobs))
	for id := range c.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	e.Len(len(ids))
	for _, id := range ids {
		c.jobs[id].append(e)
	}
	appendIDs(e, c.pending)
	appendIDs(e, c.active)
	e.Int(c.nextSeq)
	e.Int(c.round)
	e.F64(c.now)
	e.Blob(plan)
	appendEnded(e, c.ended)
	e.F64(c.life.lastTick)
	e.Bool(c.life.ticked)
	appendEnded(e, c.life.lost)
	e.Len(len(c.nodes))
	for _, n := range c.nodes {
		e.Str(n.Name)
		e.Int(n.GPUs)
		e.Str(n.Type)
	}
	e.Int(c.total)
	e.Bool(c.dynamic)
	e.Str(c.pol.Name())
	return sp, nil
}

// lendPolicy hands the policy's state to a reader on another goroutine
// (the snapshot writer): until returnPolicy the Core holds back its policy
// calls, as while a round is open, and no round begins.
// The Core's own state is written to e.
func (c *Core) lendPolicy(e *wire.Encoder) (marshal func() []byte, err error) {
	sp, err := c.appendCore(e)
	if err != nil {
		return nil, err
	}
	c.lent = true
	return sp.MarshalState, nil
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
	if v := d.Int(); d.Err() == nil && v != coreStateVersion {
		return fmt.Errorf("coordinator: core state version %d, want %d", v, coreStateVersion)
	}
	n := d.Len(64)
	c.jobs = make(map[string]*job, n)
	for range n {
		j := &job{}
		j.load(d)
		if d.Err() != nil {
			return d.Err()
		}
		if _, dup := c.jobs[j.view.ID]; dup {
			return fmt.Errorf("coordinator: core state: job %s twice", j.view.ID)
		}
		c.jobs[j.view.ID] = j
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
	c.indexNodes() // nodeAt is derived from nodes
	name, state := d.Str(), d.Blob()
	if d.Err() != nil {
		return d.Err()
	}
	if err := (topology.Cluster{Nodes: c.nodes}).Validate(); err != nil && len(c.nodes) > 0 {
		return fmt.Errorf("coordinator: core state: %w", err)
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

func (j *job) append(e *wire.Encoder) {
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
	e.Bool(v.Measurements != nil)
	e.Len(len(v.Measurements))
	for _, m := range v.Measurements {
		e.Int(m.Round)
		e.F64(m.Throughput)
		e.Int(m.BatchSize)
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
}

// load reads a job.
func (j *job) load(d *wire.Decoder) {
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

func appendIDs(e *wire.Encoder, js []*job) {
	e.Len(len(js))
	for _, j := range js {
		e.Str(j.view.ID)
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

// leasesJSON and roundJSON carry the fold's view of the last round (leases
// to send again after a restart, the lease a registration reply names).
func leasesJSON(m map[string]protocol.Lease) ([]byte, error) {
	ls := make([]protocol.Lease, 0, len(m))
	for _, l := range m {
		ls = append(ls, l)
	}
	sort.Slice(ls, func(a, b int) bool { return ls[a].Job < ls[b].Job })
	return json.Marshal(ls)
}
