package coordinator

import (
	"errors"
	"fmt"
	"slices"

	"github.com/shockwave-sched/shockwave/topology"
)

// Errors of membership changes and node-bound registrations.
var (
	ErrBadNode     = errors.New("coordinator: invalid node")
	ErrUnknownNode = errors.New("coordinator: node not in the cluster")
)

// Nodes returns the current members of the cluster in topology order (the
// order that numbers cluster-wide GPU ids).
func (c *Core) Nodes() []topology.Node { return slices.Clone(c.nodes) }

// GPUs is the current cluster's device count.
func (c *Core) GPUs() int { return c.total }

// Dynamic reports whether membership changes (Config.Dynamic, or a node
// joined or left): gangs wider than the cluster then wait for nodes.
func (c *Core) Dynamic() bool { return c.dynamic }

// JoinNode adds node n to the cluster (at the end of the topology order),
// or updates the node of that name when it is present: a node that rejoins
// with another GPU count or type keeps its place, and jobs holding devices
// it no longer has lose their lease (as for LeaveNode). The new devices are
// used from the next tick. An invalid node is refused and changes nothing.
// Membership is dynamic from then on.
func (c *Core) JoinNode(n topology.Node) error {
	if err := checkNode(n); err != nil {
		return err
	}
	i, ok := c.nodeAt[n.Name]
	if !ok {
		i = -1
	}
	switch {
	case i < 0 && len(c.nodes) >= topology.MaxNodes:
		return fmt.Errorf("%w: %q: the cluster already has %d nodes", ErrBadNode, n.Name, topology.MaxNodes)
	case i < 0 && c.total+n.GPUs > topology.MaxGPUs:
		return fmt.Errorf("%w: %q: the cluster would have more than %d GPUs", ErrBadNode, n.Name, topology.MaxGPUs)
	case i >= 0 && c.total-c.nodes[i].GPUs+n.GPUs > topology.MaxGPUs:
		return fmt.Errorf("%w: %q: the cluster would have more than %d GPUs", ErrBadNode, n.Name, topology.MaxGPUs)
	}
	c.dynamic = true
	if i < 0 {
		c.nodeAt[n.Name] = len(c.nodes)
		c.nodes = append(c.nodes, n)
	} else {
		old := c.nodes[i]
		c.nodes[i] = n
		if n.GPUs < old.GPUs {
			c.voidOn(n.Name, n.GPUs, fmt.Sprintf("node %s now has %d GPU(s)", n.Name, n.GPUs))
		}
	}
	c.total = topology.Cluster{Nodes: c.nodes}.GPUs()
	return nil
}

// LeaveNode removes the named node. Jobs holding devices there lose their
// lease at once: it is void (their GPUs show as none), a lease that made no
// progress is not counted as the job's failure, and at the next tick the job
// is placed elsewhere if the plan runs it, or gets a SUSPEND lease if not.
// Resident jobs of the node wait until it rejoins. Unknown names are refused.
func (c *Core) LeaveNode(name string) error {
	i, ok := c.nodeAt[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrUnknownNode, name)
	}
	c.dynamic = true
	c.nodes = slices.Delete(c.nodes, i, i+1)
	c.indexNodes()
	c.total = topology.Cluster{Nodes: c.nodes}.GPUs()
	c.voidOn(name, 0, "node "+name+" left")
	return nil
}

// voidOn voids the current lease of every job holding a device of node at
// local index keep or above.
func (c *Core) voidOn(node string, keep int, reason string) {
	for _, j := range c.active {
		if j.leaseRound != c.round-1 || j.leaseRound < 0 || j.void != "" {
			continue
		}
		for _, nd := range j.devices {
			if nd.Node == node && slices.Max(nd.Devices) >= keep {
				j.void, j.workers, j.devices = reason, nil, nil
				break
			}
		}
	}
}

func checkNode(n topology.Node) error {
	switch {
	case !topology.ValidName(n.Name):
		return fmt.Errorf("%w: name %q: use 1-64 letters, digits, '-' or '_'", ErrBadNode, n.Name)
	case n.GPUs <= 0 || n.GPUs > topology.MaxGPUsPerNode:
		return fmt.Errorf("%w: %q: %d GPUs, want 1..%d", ErrBadNode, n.Name, n.GPUs, topology.MaxGPUsPerNode)
	case len(n.Type) > 64:
		return fmt.Errorf("%w: %q: type label longer than 64 bytes", ErrBadNode, n.Name)
	}
	return nil
}

// nodeGPUs is the GPU count of the named node, or -1 when absent.
func (c *Core) nodeGPUs(name string) int {
	if i, ok := c.nodeAt[name]; ok {
		return c.nodes[i].GPUs
	}
	return -1
}

// indexNodes rebuilds the name → position index of the nodes.
func (c *Core) indexNodes() {
	c.nodeAt = make(map[string]int, len(c.nodes))
	for i, n := range c.nodes {
		c.nodeAt[n.Name] = i
	}
}

// checkResident validates a registration's node binding against the
// cluster: in a static cluster the node must exist and hold the gang; in
// any cluster the visible devices must be enough for the gang.
func (c *Core) checkResident(job string, workers int, node string, visible []int) error {
	if node == "" {
		return nil
	}
	if len(visible) > 0 && workers > len(visible) {
		return fmt.Errorf("%w: job %s needs %d GPUs, it sees %d on node %s", ErrTooWide, job, workers, len(visible), node)
	}
	if c.dynamic {
		return nil
	}
	g := c.nodeGPUs(node)
	if g < 0 {
		return fmt.Errorf("%w: job %s is resident on node %q", ErrUnknownNode, job, node)
	}
	if workers > g {
		return fmt.Errorf("%w: job %s needs %d GPUs, its node %s has %d", ErrTooWide, job, workers, node, g)
	}
	return nil
}

// waitReason says why an active job cannot be placed in this cluster at
// all, whatever the plan (it is then left out of the policy's snapshot), or
// "" when it can.
func (c *Core) waitReason(j *job) string {
	if j.node == "" {
		if j.view.Workers > c.total {
			return fmt.Sprintf("gang of %d GPUs wider than the cluster's %d; waits for nodes", j.view.Workers, c.total)
		}
		return ""
	}
	g := c.nodeGPUs(j.node)
	if g < 0 {
		return fmt.Sprintf("resident on node %s, which is not in the cluster; waits for it", j.node)
	}
	usable := g
	if len(j.visible) > 0 {
		usable = 0
		for _, d := range j.visible {
			if d < g {
				usable++
			}
		}
	}
	if j.view.Workers > usable {
		return fmt.Sprintf("gang of %d GPUs, its node %s offers %d of them", j.view.Workers, j.node, usable)
	}
	return ""
}
