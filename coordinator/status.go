package coordinator

import (
	"container/heap"
	"slices"
	"sort"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// JobStatus is one row of the job table. It is the wire type of the status
// reply, so the service sends Core's rows as they are.
type JobStatus = protocol.JobInfo

// Jobs returns the job table: pending and active jobs in admission order
// (pending last), then ended jobs sorted by id.
func (c *Core) Jobs() []JobStatus { return c.AppendJobs(nil) }

// AppendJobs appends the job table (Jobs) to out: the service builds the
// table each round into the buffer of an earlier round whose summary was
// written, rather than allocating a new one. The result is never nil, so
// that an empty table encodes (and digests) as [] however it was built.
func (c *Core) AppendJobs(out []JobStatus) []JobStatus {
	if out == nil {
		out = make([]JobStatus, 0, len(c.jobs))
	}
	out = slices.Grow(out, len(c.jobs))
	for _, j := range c.active {
		out = append(out, c.status(j))
	}
	for _, j := range c.pending {
		out = append(out, c.status(j))
	}
	var ended []JobStatus
	for _, j := range c.jobs {
		if j.state != Active && j.state != Pending {
			ended = append(ended, c.status(j))
		}
	}
	sort.Slice(ended, func(a, b int) bool { return ended[a].Job < ended[b].Job })
	return append(out, ended...)
}

// ShownJobs is the job table cut to n rows for a view: the whole table
// (Jobs) when it has n rows or fewer; otherwise the unfinished jobs of the
// last plan with the highest projected ρ first (ties by id), then the rest
// of the table in its order. Only the rows shown are built, and the n
// highest are kept in a heap rather than the plan sorted: at 10,000 jobs
// copying the whole table took the web view's poll 3.5 ms of the loop, and
// sorting it 5.5 ms (docs/scale.md, session 20). It returns the table's
// size too.
func (c *Core) ShownJobs(n int) (rows []JobStatus, total int) {
	if len(c.jobs) <= n {
		return c.Jobs(), len(c.jobs)
	}
	var chosen []policy.Explanation
	if c.plan != nil {
		chosen = highestRho(c.plan.Explain, n, func(e policy.Explanation) bool {
			j, ok := c.jobs[e.Job]
			return ok && (j.state == Active || j.state == Pending)
		})
	}
	rows = make([]JobStatus, 0, n)
	seen := make(map[string]bool, len(chosen))
	for _, e := range chosen {
		rows = append(rows, c.status(c.jobs[e.Job]))
		seen[e.Job] = true
	}
	// Fewer explained than shown: the rest in the table's order, built
	// only as far as needed (the ended jobs, sorted, only when reached).
	for _, group := range [][]*job{c.active, c.pending} {
		for _, j := range group {
			if len(rows) == n {
				return rows, len(c.jobs)
			}
			if !seen[j.view.ID] {
				rows = append(rows, c.status(j))
			}
		}
	}
	if len(rows) < n {
		for _, r := range c.Jobs()[len(c.active)+len(c.pending):] {
			if len(rows) == n {
				break
			}
			rows = append(rows, r)
		}
	}
	return rows, len(c.jobs)
}

// highestRho is the n explanations keep accepts (nil: all) with the
// highest projected ρ, ties by the smaller id, in that order. It keeps
// them in a heap of n, so a few of many cost little more than a pass.
func highestRho(explain []policy.Explanation, n int, keep func(policy.Explanation) bool) []policy.Explanation {
	h := &rhoHeap{}
	for _, e := range explain {
		if keep != nil && !keep(e) {
			continue
		}
		if h.Len() < n {
			heap.Push(h, e)
		} else if n > 0 && rhoBefore(e, h.es[0]) {
			h.es[0] = e
			heap.Fix(h, 0)
		}
	}
	out := make([]policy.Explanation, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(policy.Explanation)
	}
	return out
}

// rhoBefore says whether a comes before b: a higher ρ, or the same and a
// smaller id.
func rhoBefore(a, b policy.Explanation) bool {
	if a.ProjectedRho != b.ProjectedRho {
		return a.ProjectedRho > b.ProjectedRho
	}
	return a.Job < b.Job
}

// rhoHeap is a min-heap by rhoBefore: its root is the explanation the
// next one that comes before it replaces.
type rhoHeap struct{ es []policy.Explanation }

func (h *rhoHeap) Len() int           { return len(h.es) }
func (h *rhoHeap) Less(i, k int) bool { return rhoBefore(h.es[k], h.es[i]) }
func (h *rhoHeap) Swap(i, k int)      { h.es[i], h.es[k] = h.es[k], h.es[i] }
func (h *rhoHeap) Push(x any)         { h.es = append(h.es, x.(policy.Explanation)) }
func (h *rhoHeap) Pop() any {
	e := h.es[len(h.es)-1]
	h.es = h.es[:len(h.es)-1]
	return e
}

// Job returns one job's status.
// ResidentNode is the node job id's process is resident on ("" when it is
// not a job, or not resident).
func (c *Core) ResidentNode(id string) string {
	if j, ok := c.jobs[id]; ok {
		return j.node
	}
	return ""
}

func (c *Core) Job(id string) (JobStatus, bool) {
	j, ok := c.jobs[id]
	if !ok {
		return JobStatus{}, false
	}
	return c.status(j), true
}

func (c *Core) status(j *job) JobStatus {
	v := &j.view
	s := JobStatus{
		Job: v.ID, State: string(j.state), Model: v.Model, Workers: v.Workers, BatchSize: v.BatchSize,
		StepsDone: v.StepsDone, TotalSteps: v.TotalSteps, Epoch: v.Epoch, Throughput: v.Throughput,
		RunTime: v.RunTime, SubmitTime: v.SubmitTime, AdmitTime: v.AdmitTime, LastRun: v.LastRun, Failures: j.failures,
		LastSeq: j.lastSeq, Node: j.node, Reason: j.reason,
	}
	if j.state == Active && j.leaseRound == c.round-1 && j.leaseRound >= 0 {
		// Shared, not copied (thousands of rows a round): a job's grant is
		// replaced each round, never changed in place, and rows are read.
		s.GPUs, s.Devices = j.workers, j.devices
	}
	return s
}

// NodeStatus lists the cluster's members with the devices that jobs hold
// on each in the current round.
func (c *Core) NodeStatus() []protocol.NodeInfo {
	used := make(map[string]int, len(c.nodes))
	for _, j := range c.active {
		if j.leaseRound == c.round-1 && j.leaseRound >= 0 {
			for _, nd := range j.devices {
				used[nd.Node] += len(nd.Devices)
			}
		}
	}
	out := make([]protocol.NodeInfo, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = protocol.NodeInfo{Name: n.Name, GPUs: n.GPUs, Type: n.Type, Used: used[n.Name]}
	}
	return out
}
