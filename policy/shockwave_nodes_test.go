package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// placeAnyFit places gangs widest first, each on the fullest node with
// room (a gang wider than every node takes whole free nodes), and reports
// whether all were placed: the coordinator's rules for gangs that are not
// resident.
func placeAnyFit(nodes, gangs []int) bool {
	free := slices.Clone(nodes)
	gs := slices.Clone(gangs)
	slices.SortFunc(gs, func(a, b int) int { return b - a })
	maxK := slices.Max(nodes)
	for _, w := range gs {
		if w > maxK {
			left := w
			for i := range free {
				if left > 0 && free[i] == nodes[i] {
					left -= free[i]
					free[i] = 0
				}
			}
			if left > 0 {
				return false
			}
			continue
		}
		best := -1
		for i, f := range free {
			if f >= w && (best < 0 || f < free[best]) {
				best = i
			}
		}
		if best < 0 {
			return false
		}
		free[best] -= w
	}
	return true
}

// TestNodeCapacity_EveryRoundWithinItPlacesOnTheNodes: for random clusters
// (uniform and mixed) and gang widths (chains and not), every set of gangs
// whose widths sum to at most the capacity places on the nodes (unless the
// capacity was raised to the widest gang), and the capacity is the whole
// GPU count in the chain case.
func TestNodeCapacity_EveryRoundWithinItPlacesOnTheNodes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	exact := 0
	for range 5000 {
		n := 2 + rng.IntN(6)
		nodes := make([]int, n)
		k := []int{4, 8}[rng.IntN(2)]
		mixed := rng.IntN(3) == 0
		for i := range nodes {
			nodes[i] = k
			if mixed {
				nodes[i] = 1 + rng.IntN(8)
			}
		}
		total := 0
		for _, x := range nodes {
			total += x
		}
		maxK := slices.Max(nodes)
		pool := []int{1, 2, 4, 8}
		if rng.IntN(2) == 0 {
			pool = []int{1, 3, 5, 6}
		}
		var widths []int
		for _, w := range pool {
			if w <= maxK && rng.IntN(3) > 0 {
				widths = append(widths, w)
			}
		}
		if len(widths) == 0 {
			continue
		}
		capacity, note := nodeCapacity(total, nodes, widths)
		if capacity == total && note == "" && !mixed {
			exact++
		}
		if capacity < total && note == "" {
			t.Fatalf("capacity %d < %d without a note", capacity, total)
		}
		// The capacity is safe in the chain case and whenever it is the
		// bound itself (not raised to the widest gang).
		uniform := !slices.ContainsFunc(nodes, func(x int) bool { return x != nodes[0] })
		safe := uniform && chain(nodes[0], widths)
		bound := 0
		for _, x := range nodes {
			bound += max(0, x-slices.Max(widths)+1)
		}
		if !safe && capacity > max(bound, slices.Max(widths)) {
			t.Fatalf("nodes %v, widths %v: capacity %d above the bound %d", nodes, widths, capacity, bound)
		}
		for range 20 {
			var gangs []int
			sum := 0
			for range 40 {
				w := widths[rng.IntN(len(widths))]
				if sum+w <= capacity {
					gangs = append(gangs, w)
					sum += w
				}
			}
			if !placeAnyFit(nodes, gangs) && (safe || capacity <= bound) {
				t.Fatalf("nodes %v, widths %v: capacity %d, but gangs %v (sum %d) do not place", nodes, widths, capacity, gangs, sum)
			}
		}
	}
	if exact == 0 {
		t.Fatal("no chain case was generated")
	}
}

// TestNodeCapacity_FlatAndChainsKeepTheGPUCount: one node, or uniform nodes
// with widths 1, 2, 4, 8 (the traces' widths), plan the whole GPU count;
// widths 3 and 1 on 8-GPU nodes plan less.
func TestNodeCapacity_FlatAndChainsKeepTheGPUCount(t *testing.T) {
	for _, c := range []struct {
		nodes, widths []int
		want          int
	}{
		{[]int{32}, []int{1, 3, 7}, 32},
		{[]int{8, 8, 8, 8}, []int{1, 2, 4, 8}, 32},
		{[]int{4, 4, 4, 4, 4, 4, 4, 4}, []int{1, 2, 4, 8}, 32},
		{[]int{8, 8, 8, 8}, []int{1, 3}, 24},
		{[]int{8, 8, 8, 8}, []int{16, 2}, 32},
		{[]int{8, 8, 8, 8}, []int{12, 2}, 28}, // 12 is not a multiple of 8: bound 4·7
	} {
		if got, _ := nodeCapacity(32, c.nodes, c.widths); got != c.want {
			t.Errorf("nodes %v widths %v: capacity %d, want %d", c.nodes, c.widths, got, c.want)
		}
	}
}

// TestShockwave_AJobLeftOutOfEarlierSnapshotsGetsATarget: with dynamic
// membership the coordinator leaves a resident job out of the snapshot
// while its node is away; when another node of the same size replaces one
// (the same node sizes) and the job's node is back, it appears in the
// snapshot, and Shockwave's next solve (a periodic one here) gives it a
// fair-share target: a missing one once made the market refuse the problem
// ("fair finish = 0").
func TestShockwave_AJobLeftOutOfEarlierSnapshotsGetsATarget(t *testing.T) {
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*Job
	for i, w := range []int{1, 1, 2} {
		j := &Job{ID: fmt.Sprint("j", i), Seq: i, Model: "ResNet-18", Mode: "static", Workers: w,
			InitialBatchSize: 32, BatchSize: 32, DatasetSize: 50000, TotalSteps: 200000, Throughput: 10, LastRun: -1}
		jobs = append(jobs, j)
		p.Admit(j)
	}
	snap := func(r int, js []*Job) *Snapshot {
		return &Snapshot{Round: r, Now: 120 * float64(r), GPUs: 4, Nodes: []int{2, 2}, RoundSeconds: 120, Jobs: js}
	}
	if _, err := p.Allocate(snap(0, jobs[:2])); err != nil {
		t.Fatal(err)
	}
	solved := false
	for r := 1; r <= 2*swReoptRounds; r++ {
		plan, err := p.Allocate(snap(r, jobs))
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		solved = solved || plan.Solved
	}
	if !solved {
		t.Fatal("no re-solve happened: the test tests nothing")
	}
}
