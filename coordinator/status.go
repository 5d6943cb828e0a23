package coordinator

import (
	"github.com/shockwave-sched/shockwave/protocol"
	"slices"
	"sort"
)

// JobStatus is one row of the job table. It is the wire type of the status
// reply, so the service sends Core's rows as they are.
type JobStatus = protocol.JobInfo

// Jobs returns the job table: pending and active jobs in admission order
// (pending last), then ended jobs sorted by id.
func (c *Core) Jobs() []JobStatus {
	out := make([]JobStatus, 0, len(c.jobs))
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
		s.GPUs = slices.Clone(j.workers)
		s.Devices = cloneGrant(j.devices)
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
