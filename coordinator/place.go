package coordinator

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// placer assigns the devices of one round (see doc.go, "Placement"). Nodes
// are kept in buckets by their count of free devices, so that the best-fit
// node for a gang (the fullest node with room) and the emptiest node are
// found in O(K·N/64) for N nodes of at most K GPUs, without sorting.
type placer struct {
	nodes  []topology.Node
	off    []int          // first cluster-wide id of each node
	index  map[string]int // node name → position
	taken  []bool         // by cluster-wide id
	free   []int          // free devices per node
	maxK   int            // largest node
	prefix []int          // prefix[i]: the i+1 largest node sizes summed
	byFree [][]uint64     // byFree[f]: bitset of the nodes with f free devices
}

func newPlacer(nodes []topology.Node) *placer {
	cl := topology.Cluster{Nodes: nodes}
	p := &placer{nodes: nodes, off: cl.Offsets(), index: make(map[string]int, len(nodes)),
		taken: make([]bool, cl.GPUs()), free: make([]int, len(nodes)), maxK: cl.MaxPerNode()}
	for i, n := range nodes {
		p.index[n.Name] = i
	}
	words := (len(nodes) + 63) / 64
	p.byFree = make([][]uint64, p.maxK+1)
	for f := range p.byFree {
		p.byFree[f] = make([]uint64, words)
	}
	sizes := make([]int, len(nodes))
	for i, n := range nodes {
		sizes[i] = n.GPUs
	}
	slices.SortFunc(sizes, func(a, b int) int { return cmp.Compare(b, a) })
	p.prefix = sizes
	for i := 1; i < len(sizes); i++ {
		p.prefix[i] += p.prefix[i-1]
	}
	p.reset()
	return p
}

// reset frees every device.
func (p *placer) reset() {
	clear(p.taken)
	for f := range p.byFree {
		clear(p.byFree[f])
	}
	for i, n := range p.nodes {
		p.free[i] = n.GPUs
		p.byFree[n.GPUs][i/64] |= 1 << (i % 64)
	}
}

func (p *placer) setFree(n, f int) {
	p.byFree[p.free[n]][n/64] &^= 1 << (n % 64)
	p.free[n] = f
	p.byFree[f][n/64] |= 1 << (n % 64)
}

// first is the lowest-indexed node with exactly f free devices, or -1.
func (p *placer) first(f int) int {
	for w, x := range p.byFree[f] {
		if x != 0 {
			return w*64 + bits.TrailingZeros64(x)
		}
	}
	return -1
}

// bestFit is the node with the fewest free devices that still has need,
// the lowest-indexed among equals, or -1.
func (p *placer) bestFit(need int) int {
	for f := max(need, 1); f <= p.maxK; f++ {
		if n := p.first(f); n >= 0 {
			return n
		}
	}
	return -1
}

// emptiest is the node with the most free devices (lowest index first), or
// -1 when every device is taken.
func (p *placer) emptiest() int {
	for f := p.maxK; f >= 1; f-- {
		if n := p.first(f); n >= 0 {
			return n
		}
	}
	return -1
}

// take marks count free devices of node n taken, lowest local index first,
// only among visible ones when visible is not empty. It returns them, or
// nil (taking nothing) when there are too few.
func (p *placer) take(n, count int, visible []int) []int {
	if p.free[n] < count { // the common refusal of a back-fill: a resident's node is full
		return nil
	}
	base, k := p.off[n], p.nodes[n].GPUs
	out := make([]int, 0, count)
	if len(visible) == 0 {
		for d := 0; d < k && len(out) < count; d++ {
			if !p.taken[base+d] {
				out = append(out, d)
			}
		}
	} else {
		for _, d := range visible {
			if d < k && !p.taken[base+d] && len(out) < count {
				out = append(out, d)
			}
		}
	}
	if len(out) < count {
		return nil
	}
	for _, d := range out {
		p.taken[base+d] = true
	}
	p.setFree(n, p.free[n]-count)
	return out
}

// keep takes exactly the devices of a previous grant when every one still
// exists and is free.
func (p *placer) keep(g []protocol.NodeDevices) bool {
	if len(g) == 0 {
		return false
	}
	for _, nd := range g {
		n, ok := p.index[nd.Node]
		if !ok {
			return false
		}
		for _, d := range nd.Devices {
			if d >= p.nodes[n].GPUs || p.taken[p.off[n]+d] {
				return false
			}
		}
	}
	for _, nd := range g {
		n := p.index[nd.Node]
		for _, d := range nd.Devices {
			p.taken[p.off[n]+d] = true
		}
		p.setFree(n, p.free[n]-len(nd.Devices))
	}
	return true
}

// release frees the devices of a grant this placer made.
func (p *placer) release(g []protocol.NodeDevices) {
	for _, nd := range g {
		n := p.index[nd.Node]
		for _, d := range nd.Devices {
			p.taken[p.off[n]+d] = false
		}
		p.setFree(n, p.free[n]+len(nd.Devices))
	}
}

// fit finds devices for a gang of w GPUs under the placement rules, takes
// them and returns the grant in topology order, or nil:
//   - a resident job (node != ""): w devices of its node, among visible;
//   - w ≤ the largest node: one node, the fullest that has room (best fit);
//   - wider: the fewest nodes, the emptiest (whole free nodes) first and
//     the last part best fit; when the free devices do not allow the
//     fewest nodes the cluster's sizes allow, nil.
func (p *placer) fit(w int, node string, visible []int) []protocol.NodeDevices {
	if node != "" {
		n, ok := p.index[node]
		if !ok {
			return nil
		}
		if d := p.take(n, w, visible); d != nil {
			return []protocol.NodeDevices{{Node: node, Devices: d}}
		}
		return nil
	}
	if w <= 0 || w > len(p.taken) {
		return nil
	}
	if w <= p.maxK {
		n := p.bestFit(w)
		if n < 0 {
			return nil
		}
		return []protocol.NodeDevices{{Node: p.nodes[n].Name, Devices: p.take(n, w, nil)}}
	}
	var g []protocol.NodeDevices
	left := w
	fewest, _ := slices.BinarySearch(p.prefix, w) // index of the first sum ≥ w
	for left > 0 && len(g) <= fewest {
		n := p.bestFit(left)
		if n < 0 {
			n = p.emptiest()
		}
		if n < 0 {
			break
		}
		part := min(left, p.free[n])
		g = append(g, protocol.NodeDevices{Node: p.nodes[n].Name, Devices: p.take(n, part, nil)})
		left -= part
	}
	if left > 0 {
		p.release(g)
		return nil
	}
	slices.SortFunc(g, func(a, b protocol.NodeDevices) int { return cmp.Compare(p.index[a.Node], p.index[b.Node]) })
	return g
}

// ids converts a grant to cluster-wide GPU ids, in the grant's order.
func (p *placer) ids(g []protocol.NodeDevices) []int {
	var out []int
	for _, nd := range g {
		base := p.off[p.index[nd.Node]]
		for _, d := range nd.Devices {
			out = append(out, base+d)
		}
	}
	return out
}

// sameGrant reports two grants of the same devices in the same order.
func sameGrant(a, b []protocol.NodeDevices) bool {
	return slices.EqualFunc(a, b, func(x, y protocol.NodeDevices) bool {
		return x.Node == y.Node && slices.Equal(x.Devices, y.Devices)
	})
}
