package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// The runner is the part of the fold that serves node agents: the
// submitted jobs (command, width, environment, attempts), the nodes that
// joined, and the desired state of each node derived from the current
// round's leases. Like the rest of the fold it changes only through log
// records, so a replay rebuilds it exactly:
//
//	<prefix>.log.submit  a submission, with the id the client chose
//	<prefix>.log.cancel  a cancellation
//	<prefix>.log.node    a node joined (an agent's join) or left (its
//	                     heartbeats stopped; the service decides when)
//	<prefix>.log.agent   an agent's report that a job's processes exited
//
// Exit codes: a run that exits while it still holds its grant on the node
// (same attempt, same grant, lease not expired) ended by itself. Status 0
// completes the job (a command that never registered through the SDK); a
// non-zero status is a failure: the job restarts as a new attempt while
// fewer than MaxRetries failures happened, then it fails with the exit in
// its reason. An exit after the grant moved, ended or expired is the
// expected end of a suspended or preempted run and changes nothing.
const (
	logSubmit = "log.submit"
	logCancel = "log.cancel"
	logNode   = "log.node"
	logAgent  = "log.agent"
)

// Record kinds of the runner.
const (
	kindSubmit = "submit"
	kindCancel = "cancel"
	kindNode   = "node"
	kindReport = "report"
)

type runner struct {
	subs  map[string]*submission
	nodes map[string]protocol.AgentHello // joined nodes
	since map[string]int                 // job → round its current grant began
	// last holds the nodes of each job's most recent grant, kept after the
	// grant ends, so that the agent that ran the job may still carry its
	// last batches (uplink.go); dropped when the job ends.
	last map[string][]string

	// cache holds every node's assignments, and residents its relayed
	// resident jobs' RUN leases, until dirty (desired).
	cache     map[string][]protocol.Assignment
	residents map[string][]protocol.Lease
	dirty     bool
}

type submission struct {
	spec     protocol.Submit
	attempt  int
	failures int
}

func newRunner() *runner {
	return &runner{subs: map[string]*submission{}, nodes: map[string]protocol.AgentHello{}, since: map[string]int{}, last: map[string][]string{}}
}

// nodeRecord is a node joining or leaving.
type nodeRecord struct {
	V      int                 `json:"v"`
	Op     string              `json:"op"` // "join" or "leave"
	Hello  protocol.AgentHello `json:"hello"`
	Reason string              `json:"reason,omitempty"`
}

func decodeNodeRecord(data []byte) (*nodeRecord, error) {
	var r nodeRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("coordinator: node record: %w", err)
	}
	if r.V != protocol.Version || (r.Op != "join" && r.Op != "leave") {
		return nil, fmt.Errorf("coordinator: node record: version %d, op %q", r.V, r.Op)
	}
	if err := r.Hello.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// applyRunner folds the runner's records; ok is false for other subjects.
func (f *fold) applyRunner(r record) (outcome, bool) {
	switch r.Subject {
	case f.subj.Prefix + "." + logSubmit, f.subj.Prefix + "." + logCancel, f.subj.Prefix + "." + logNode, f.subj.Prefix + "." + logAgent:
		f.run.dirty = true
	}
	switch r.Subject {
	case f.subj.Prefix + "." + logSubmit:
		return f.submit(r), true
	case f.subj.Prefix + "." + logCancel:
		return f.cancel(r), true
	case f.subj.Prefix + "." + logNode:
		return f.node(r), true
	case f.subj.Prefix + "." + logAgent:
		return f.report(r), true
	}
	return outcome{}, false
}

func submitError(err error) *protocol.SubmitReply {
	return &protocol.SubmitReply{V: protocol.Version, Error: protocol.ErrorOf(replyCode(err), err)}
}

func (f *fold) submit(r record) outcome {
	o := outcome{kind: kindSubmit, reply: r.Header.Get(hdrReply)}
	s, err := protocol.DecodeSubmit(r.Data, f.limit)
	if err == nil && s.Job == "" {
		err = fmt.Errorf("%w: submission without a job id", protocol.ErrInvalid)
	}
	if err == nil {
		o.job = s.Job
		if old, ok := f.run.subs[s.Job]; ok && sameSubmission(&old.spec, s) {
			// a client's retry of a submission that was stored
			st, _ := f.core.Job(s.Job)
			o.agentAnswer = &protocol.SubmitReply{V: protocol.Version, Job: s.Job, State: st.State}
			return o
		}
		if err = f.core.Submit(f.now, s); err == nil {
			f.run.subs[s.Job] = &submission{spec: *s}
			o.agentAnswer = &protocol.SubmitReply{V: protocol.Version, Job: s.Job, State: string(Pending)}
			return o
		}
	}
	o.reject(rejectReason(err), err)
	o.agentAnswer = submitError(err)
	return o
}

func sameSubmission(a, b *protocol.Submit) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func (f *fold) cancel(r record) outcome {
	o := outcome{kind: kindCancel, reply: r.Header.Get(hdrReply)}
	c, err := protocol.DecodeCancel(r.Data, f.limit)
	if err == nil {
		o.job = c.Job
		var l *protocol.Lease
		if l, err = f.core.EndJob(f.now, c.Job, Cancelled, "cancelled by an operator"); err == nil {
			if l != nil {
				o.exits = append(o.exits, *l)
			}
			delete(f.leases, c.Job)
			o.desired = true
			o.agentAnswer = &protocol.SubmitReply{V: protocol.Version, Job: c.Job, State: string(Cancelled)}
			return o
		}
	}
	o.reject(rejectReason(err), err)
	o.agentAnswer = submitError(err)
	return o
}

func (f *fold) node(r record) outcome {
	o := outcome{kind: kindNode, reply: r.Header.Get(hdrReply)}
	rec, err := decodeNodeRecord(r.Data)
	if err != nil {
		o.reject("invalid", err)
		o.agentAnswer = &protocol.AgentReply{V: protocol.Version, Error: protocol.ErrorOf(protocol.CodeBadRequest, err)}
		return o
	}
	h := rec.Hello
	o.job = h.Node // the node, for logs
	old, known := f.run.nodes[h.Node]
	// Only a node leaving changes the other nodes' states (a gang placed
	// there stops on every node); a joining node has nothing placed yet
	// and takes its own state from the reply. Sending every node its state
	// on every join made a cluster of N nodes starting at once cost N²
	// messages, all published on the loop.
	switch {
	case rec.Op == "leave" && known:
		err = f.leave(h.Node)
		o.desired = true
	case rec.Op == "leave":
	case known && old.GPUs == h.GPUs && old.Type == h.Type:
		f.run.nodes[h.Node] = h // a rejoin: the address may have changed
	default:
		if known {
			if err = f.leave(h.Node); err != nil {
				break
			}
			o.desired = true
		}
		if err = f.core.JoinNode(topology.Node{Name: h.Node, GPUs: h.GPUs, Type: h.Type}); err == nil {
			f.run.nodes[h.Node] = h
		}
	}
	if err != nil {
		o.reject("rejected", err)
		o.agentAnswer = &protocol.AgentReply{V: protocol.Version, Error: protocol.ErrorOf(protocol.CodeRejected, err)}
		return o
	}
	if rec.Op == "join" {
		o.agentAnswer = &protocol.AgentReply{V: protocol.Version, Desired: f.desired(h.Node)}
	}
	return o
}

// leave removes a node: Core suspends the jobs placed there, and their
// grants on every node end now (a gang that lost a node stops as a whole).
func (f *fold) leave(name string) error {
	if err := f.core.LeaveNode(name); err != nil {
		return err
	}
	delete(f.run.nodes, name)
	for job, l := range f.leases {
		if slices.ContainsFunc(f.leaseNodes(l), func(d protocol.NodeDevices) bool { return d.Node == name }) {
			delete(f.leases, job)
			delete(f.run.since, job)
		}
	}
	return nil
}

func (f *fold) report(r record) outcome {
	o := outcome{kind: kindReport, reply: r.Header.Get(hdrReply)}
	rep, err := protocol.DecodeAgentReport(r.Data, f.limit)
	if err != nil {
		o.reject(protocol.Reason(err), err)
		o.agentAnswer = &protocol.AgentReply{V: protocol.Version, Error: protocol.ErrorOf(protocol.Code(err), err)}
		return o
	}
	o.job = rep.Job
	o.agentAnswer = &protocol.AgentReply{V: protocol.Version}
	sub, ok := f.run.subs[rep.Job]
	if !ok {
		err := fmt.Errorf("%w: %s is not a submitted job", ErrUnknownJob, rep.Job)
		o.reject("unknown_job", err)
		o.agentAnswer = &protocol.AgentReply{V: protocol.Version, Error: protocol.ErrorOf(protocol.CodeRejected, err)}
		return o
	}
	if rep.Event != protocol.ReportExited || !f.holds(rep) || rep.Attempt != sub.attempt {
		return o // the expected end of a run that lost its grant, or stale
	}
	where := fmt.Sprintf("on %s (attempt %d)", rep.Node, sub.attempt+1)
	if rep.Detail != "" {
		where += ": " + rep.Detail
	}
	o.desired = true
	var l *protocol.Lease
	if rep.Code == 0 {
		l, err = f.core.EndJob(f.now, rep.Job, Completed, "process exited with status 0 "+where)
	} else {
		sub.failures++
		reason := fmt.Sprintf("exited with status %d %s", rep.Code, where)
		if sub.failures > sub.spec.MaxRetries {
			l, err = f.core.EndJob(f.now, rep.Job, Failed, fmt.Sprintf("%s; %d failures, retries exhausted (max %d)",
				reason, sub.failures, sub.spec.MaxRetries))
		} else {
			sub.attempt++
			f.core.NoteExit(rep.Job, fmt.Sprintf("%s; restarted (failure %d of at most %d retries)", reason, sub.failures, sub.spec.MaxRetries))
			return o
		}
	}
	if err != nil {
		o.reject(rejectReason(err), err)
		return o
	}
	if l != nil {
		o.exits = append(o.exits, *l)
	}
	delete(f.leases, rep.Job)
	return o
}

// holds reports whether the report's run still holds its job's grant: the
// job is active and holds an unexpired RUN lease on the node, granted in
// the same uninterrupted stretch.
func (f *fold) holds(rep *protocol.AgentReport) bool {
	st, ok := f.core.Managed(rep.Job)
	l, held := f.leases[rep.Job]
	if !ok || st != Active || !held || f.now >= l.Expiry || f.run.since[rep.Job] != rep.Since {
		return false
	}
	return slices.ContainsFunc(f.leaseNodes(l), func(d protocol.NodeDevices) bool { return d.Node == rep.Node })
}

// afterTick notes where each job's uninterrupted grant began, and the
// nodes of each job's most recent grant.
func (f *fold) afterTick() {
	f.run.afterTick(f.leases)
	for job, l := range f.leases {
		if _, ok := f.run.subs[job]; !ok {
			continue // only agents' jobs are vouched for (uplink.go)
		}
		nodes := f.run.last[job][:0]
		for _, d := range f.leaseNodes(l) {
			nodes = append(nodes, d.Node)
		}
		f.run.last[job] = nodes
	}
	for job := range f.run.last {
		if st, managed := f.core.Managed(job); !managed || (st != Pending && st != Active) {
			delete(f.run.last, job)
		}
	}
}

// afterTick notes where each job's uninterrupted grant began.
func (rn *runner) afterTick(leases map[string]protocol.Lease) {
	rn.dirty = true
	for job := range rn.since {
		if _, ok := leases[job]; !ok {
			delete(rn.since, job)
		}
	}
	for job, l := range leases {
		if _, ok := rn.since[job]; !ok || !l.Extension {
			rn.since[job] = l.Round
		}
	}
}

// leaseNodes is a RUN lease's grant per node; a lease without Devices (a
// log written before leases named them) is on the flat pool's "node-0".
func (f *fold) leaseNodes(l protocol.Lease) []protocol.NodeDevices {
	if len(l.Devices) > 0 {
		return l.Devices
	}
	if len(l.Workers) == 0 {
		return nil
	}
	return []protocol.NodeDevices{{Node: topology.Flat(1).Nodes[0].Name, Devices: slices.Clone(l.Workers)}}
}

// joined lists the joined nodes by name.
func (rn *runner) joined() []string {
	names := make([]string, 0, len(rn.nodes))
	for n := range rn.nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// desired is node's desired state: every submitted job granted devices
// there in the current round, with its processes' rank layout. The
// assignments of all nodes are built in one pass over the leases and kept
// until a record changes them (runner.dirty).
func (f *fold) desired(node string) *protocol.NodeDesired {
	d := &protocol.NodeDesired{V: protocol.Version, Node: node, Now: f.now, Jobs: []protocol.Assignment{}}
	if f.core == nil {
		return d
	}
	if f.run.dirty || f.run.cache == nil {
		f.run.cache, f.run.residents = f.assignments()
		f.run.dirty = false
	}
	d.Round = f.core.NextRound() - 1
	if a := f.run.cache[node]; a != nil {
		d.Jobs = a
	}
	d.Residents = f.run.residents[node]
	return d
}

// assignments lays out every granted submitted job, per node, and lists
// the RUN leases of the granted resident jobs whose node's agent relays
// them (relay.go), per node.
func (f *fold) assignments() (map[string][]protocol.Assignment, map[string][]protocol.Lease) {
	out, residents := map[string][]protocol.Assignment{}, map[string][]protocol.Lease{}
	jobs := make([]string, 0, len(f.leases))
	for job := range f.leases {
		jobs = append(jobs, job)
	}
	sort.Strings(jobs)
	for _, job := range jobs {
		if node, ok := f.relayedResident(job); ok {
			residents[node] = append(residents[node], f.leases[job].Clone())
			continue
		}
		sub, ok := f.run.subs[job]
		if st, managed := f.core.Managed(job); !ok || !managed || st != Active {
			continue
		}
		for node, a := range f.layout(sub, f.leases[job]) {
			out[node] = append(out[node], a)
		}
	}
	return out, residents
}

// layout lays out the processes of a job's grant, per node. Each node runs
// RanksPerNode processes (one per device when that does not divide the
// node's devices), ranks numbered in grant order.
func (f *fold) layout(sub *submission, l protocol.Lease) map[string]protocol.Assignment {
	nodes := f.leaseNodes(l)
	if len(nodes) == 0 {
		return nil
	}
	per := max(sub.spec.RanksPerNode, 1)
	procs, offsets, world := make([]int, len(nodes)), make([]int, len(nodes)), 0
	for i, nd := range nodes {
		procs[i] = per
		if len(nd.Devices)%per != 0 {
			procs[i] = len(nd.Devices)
		}
		offsets[i] = world
		world += procs[i]
	}
	master := nodes[0].Node
	if h, ok := f.run.nodes[master]; ok && h.Addr != "" {
		master = h.Addr
	}
	job, since := sub.spec.Job, f.run.since[sub.spec.Job]
	out := make(map[string]protocol.Assignment, len(nodes))
	var relayed *protocol.Lease // one copy for the job's relaying nodes
	for i, nd := range nodes {
		a := protocol.Assignment{Job: job, Attempt: sub.attempt, Since: since,
			Command: sub.spec.Command, Env: sub.spec.Env, Devices: nd.Devices, Procs: procs[i],
			RankOffset: offsets[i], WorldSize: world, MasterAddr: master,
			MasterPort: masterPort(job, sub.attempt, since), Expiry: f.core.roundExpiry(l)}
		if f.relaysOn(nd.Node) {
			if relayed == nil {
				c := l.Clone()
				relayed = &c
			}
			a.Lease = relayed
		}
		out[nd.Node] = a
	}
	return out
}

// masterPort derives the rendezvous port of a run from its identity, in
// [20000, 40000): every process of the run computes the same one.
func masterPort(job string, attempt, since int) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d/%d", job, attempt, since)
	return 20000 + int(h.Sum32()%20000)
}

// placedOn reports whether job is a submitted job granted devices on node.
func (f *fold) placedOn(job, node string) bool {
	if _, ok := f.run.subs[job]; !ok {
		return false
	}
	if st, _ := f.core.Managed(job); st != Active {
		return false
	}
	l, ok := f.leases[job]
	return ok && slices.ContainsFunc(f.leaseNodes(l), func(d protocol.NodeDevices) bool { return d.Node == node })
}

var errNotPlaced = errors.New("coordinator: the job is not placed on this node")

// runnerState is the runner's part of a state snapshot (snapshot.go).
type runnerState struct {
	V     int                   `json:"v"`
	Subs  []submissionState     `json:"subs"`
	Nodes []protocol.AgentHello `json:"nodes"`
	Since map[string]int        `json:"since"`
	// Last: the nodes of each job's most recent grant (uplink.go); absent
	// in snapshots written before the uplink.
	Last map[string][]string `json:"last,omitempty"`
}

type submissionState struct {
	Spec     protocol.Submit `json:"spec"`
	Attempt  int             `json:"attempt"`
	Failures int             `json:"failures"`
}

// marshal encodes the runner deterministically (sorted by job and node).
func (rn *runner) marshal() ([]byte, error) { return rn.capture().marshal() }

// capture copies the runner's state for marshal, which may run on another
// goroutine while the runner goes on: at 10,000 submitted jobs encoding
// takes several times as long as copying. The submissions' specs are
// shared (a spec is never written after its submission record); the maps
// are copied, and each job's last nodes too (afterTick reuses them).
func (rn *runner) capture() *runnerState {
	st := &runnerState{V: protocol.Version, Subs: make([]submissionState, 0, len(rn.subs)),
		Nodes: make([]protocol.AgentHello, 0, len(rn.nodes)), Since: maps.Clone(rn.since),
		Last: make(map[string][]string, len(rn.last))}
	for _, s := range rn.subs {
		st.Subs = append(st.Subs, submissionState{Spec: s.spec, Attempt: s.attempt, Failures: s.failures})
	}
	for _, h := range rn.nodes {
		st.Nodes = append(st.Nodes, h)
	}
	for j, nodes := range rn.last {
		st.Last[j] = slices.Clone(nodes)
	}
	return st
}

// marshal encodes a captured runner state, sorted by job and node.
func (st *runnerState) marshal() ([]byte, error) {
	slices.SortFunc(st.Subs, func(a, b submissionState) int { return strings.Compare(a.Spec.Job, b.Spec.Job) })
	slices.SortFunc(st.Nodes, func(a, b protocol.AgentHello) int { return strings.Compare(a.Node, b.Node) })
	return json.Marshal(st)
}

// unmarshal restores a runner that marshal encoded, validating every field.
func (rn *runner) unmarshal(data []byte) error {
	var st runnerState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return err
	}
	if st.V != protocol.Version {
		return fmt.Errorf("runner state version %d", st.V)
	}
	for _, s := range st.Subs {
		if err := s.Spec.Validate(); err != nil || s.Spec.Job == "" || s.Attempt < 0 || s.Failures < 0 {
			return fmt.Errorf("submission %q: %v", s.Spec.Job, err)
		}
		rn.subs[s.Spec.Job] = &submission{spec: s.Spec, attempt: s.Attempt, failures: s.Failures}
	}
	for _, h := range st.Nodes {
		if err := h.Validate(); err != nil {
			return err
		}
		rn.nodes[h.Node] = h
	}
	for job, r := range st.Since {
		if protocol.ValidateJobID("runner", job) != nil || r < 0 {
			return fmt.Errorf("grant start of %q: round %d", job, r)
		}
		rn.since[job] = r
	}
	for job, nodes := range st.Last {
		if protocol.ValidateJobID("runner", job) != nil || len(nodes) == 0 || len(nodes) > maxGrantNodes {
			return fmt.Errorf("last grant of %q: %d nodes", job, len(nodes))
		}
		for _, n := range nodes {
			if err := protocol.ValidateNodeName("runner", "last", n); err != nil {
				return err
			}
		}
		rn.last[job] = nodes
	}
	return nil
}

// maxGrantNodes bounds the nodes of one grant in a snapshot.
const maxGrantNodes = 4096
