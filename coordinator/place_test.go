package coordinator

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// placeCase is one random placement problem: nodes, active jobs (some
// resident, some holding devices from the previous round) and a plan.
type placeCase struct {
	nodes []topology.Node
	jobs  []*job
	plan  []*job
}

func randomNodes(rng *rand.Rand) []topology.Node {
	n := 1 + rng.IntN(8)
	uniform := rng.IntN(2) == 0
	k := []int{1, 2, 4, 8}[rng.IntN(4)]
	nodes := make([]topology.Node, n)
	for i := range nodes {
		g := k
		if !uniform {
			g = 1 + rng.IntN(8)
		}
		nodes[i] = topology.Node{Name: "n" + strconv.Itoa(i), GPUs: g}
	}
	return nodes
}

// randomCase builds a case; with keepers, a first placement of a random
// plan gives some jobs devices of the previous round.
func randomCase(rng *rand.Rand, keepers, residents, visible bool) (*Core, *placeCase) {
	nodes := randomNodes(rng)
	total := topology.Cluster{Nodes: nodes}.GPUs()
	c, err := NewCore(Config{Cluster: topology.Cluster{Nodes: nodes}}, gavelForTest())
	if err != nil {
		panic(err)
	}
	pc := &placeCase{nodes: nodes}
	for i := range 1 + rng.IntN(30) {
		w := []int{1, 1, 1, 2, 2, 3, 4, 8, 1 + rng.IntN(total)}[rng.IntN(9)]
		w = min(w, total)
		j := &job{state: Active, leaseRound: -1}
		j.view.ID, j.view.Workers = "j"+strconv.Itoa(i), w
		if residents && rng.IntN(5) == 0 {
			n := nodes[rng.IntN(len(nodes))]
			j.node = n.Name
			j.view.Workers = 1 + rng.IntN(n.GPUs)
			if visible && rng.IntN(2) == 0 {
				for d := range n.GPUs {
					if rng.IntN(3) > 0 || len(j.visible) < j.view.Workers && n.GPUs-d <= j.view.Workers-len(j.visible) {
						j.visible = append(j.visible, d)
					}
				}
			}
		}
		pc.jobs = append(pc.jobs, j)
	}
	c.active = pc.jobs
	if keepers {
		first := randomPlan(rng, pc.jobs, total)
		run, _ := c.placeRun(newPlacer(nodes), first, pc.jobs, &policy.Plan{Run: ids(first)})
		for _, j := range run {
			j.devices, j.next, j.leaseRound = j.next, nil, 0
		}
		c.round = 1
	}
	pc.plan = randomPlan(rng, pc.jobs, total)
	return c, pc
}

func gavelForTest() policy.Policy {
	p, err := policy.New("gavel", policy.Options{})
	if err != nil {
		panic(err)
	}
	return p
}

// randomPlan picks jobs in random order while their widths fit total.
func randomPlan(rng *rand.Rand, jobs []*job, total int) []*job {
	var plan []*job
	used := 0
	for _, i := range rng.Perm(len(jobs)) {
		if j := jobs[i]; used+j.view.Workers <= total && rng.IntN(4) > 0 {
			plan = append(plan, j)
			used += j.view.Workers
		}
	}
	return plan
}

func ids(js []*job) []string {
	out := make([]string, len(js))
	for i, j := range js {
		out[i] = j.view.ID
	}
	return out
}

// checkPlacement verifies the placement rules on the outcome of placeRun.
func checkPlacement(t *testing.T, pc *placeCase, run []*job) {
	t.Helper()
	size := map[string]int{}
	maxK := 0
	for _, n := range pc.nodes {
		size[n.Name] = n.GPUs
		maxK = max(maxK, n.GPUs)
	}
	sizes := make([]int, 0, len(pc.nodes))
	for _, n := range pc.nodes {
		sizes = append(sizes, n.GPUs)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
	fewest := func(w int) int {
		for i, s := 0, 0; i < len(sizes); i++ {
			if s += sizes[i]; s >= w {
				return i + 1
			}
		}
		return -1
	}
	owner := map[string]string{}
	used := map[string]int{}
	for _, j := range run {
		n := 0
		for _, nd := range j.next {
			for _, d := range nd.Devices {
				key := fmt.Sprintf("%s/%d", nd.Node, d)
				if o, dup := owner[key]; dup {
					t.Fatalf("device %s given to %s and %s", key, o, j.view.ID)
				}
				if d < 0 || d >= size[nd.Node] {
					t.Fatalf("job %s got device %s, node has %d", j.view.ID, key, size[nd.Node])
				}
				owner[key] = j.view.ID
				used[nd.Node]++
				n++
				if j.node != "" && (nd.Node != j.node || len(j.visible) > 0 && !slices.Contains(j.visible, d)) {
					t.Fatalf("resident job %s (node %s, visible %v) got %v", j.view.ID, j.node, j.visible, j.next)
				}
			}
		}
		if n != j.view.Workers {
			t.Fatalf("job %s of %d GPUs got %d: %v", j.view.ID, j.view.Workers, n, j.next)
		}
		switch w := j.view.Workers; {
		case j.node != "":
		case w <= maxK && len(j.next) != 1:
			t.Fatalf("job %s of %d GPUs split over %d nodes though a node has %d: %v", j.view.ID, w, len(j.next), maxK, j.next)
		case w > maxK && len(j.next) != fewest(w):
			t.Fatalf("job %s of %d GPUs on %d nodes, the fewest is %d: %v", j.view.ID, w, len(j.next), fewest(w), j.next)
		}
	}
	placed := map[*job]bool{}
	for _, j := range run {
		placed[j] = true
	}
	for _, j := range pc.plan {
		if placed[j] || j.node != "" || j.view.Workers > maxK {
			continue
		}
		for _, n := range pc.nodes {
			if n.GPUs-used[n.Name] >= j.view.Workers {
				t.Fatalf("planned job %s of %d GPUs dropped though node %s has %d free", j.view.ID, j.view.Workers, n.Name, n.GPUs-used[n.Name])
			}
		}
	}
}

// TestPlace_NeverTwoJobsOnOneDeviceAndGangsOnOneNodeWhenSomeNodeHasRoom:
// over random clusters (uniform and mixed), plans, previous placements and
// resident jobs, no device is given twice, every gang gets exactly its
// width, a gang no wider than the largest node is on one node, a wider one
// on the fewest nodes, a resident job on its node within its visible
// devices, and a planned gang is dropped only when no node has room for it.
func TestPlace_NeverTwoJobsOnOneDeviceAndGangsOnOneNodeWhenSomeNodeHasRoom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		c, pc := randomCase(rng, i%2 == 0, i%3 != 0, i%5 == 0)
		run, _ := c.placeRun(newPlacer(pc.nodes), pc.plan, pc.jobs, &policy.Plan{Run: ids(pc.plan)})
		checkPlacement(t, pc, run)
	}
}

// TestPlace_WithoutResidentsEveryPlanThatFitsTheNodesIsPlaced: with no
// resident jobs and gang widths that divide a uniform node size (or are
// multiples of it), every plan that fits the GPU count is placed whole,
// whatever devices jobs held before (repacking removes fragmentation).
func TestPlace_WithoutResidentsEveryPlanThatFitsTheNodesIsPlaced(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		k := []int{2, 4, 8}[rng.IntN(3)]
		nodes := topology.Uniform(1+rng.IntN(6), k).Nodes
		c, _ := NewCore(Config{Cluster: topology.Cluster{Nodes: nodes}}, gavelForTest())
		var jobs []*job
		for i := range 1 + rng.IntN(20) {
			j := &job{state: Active, leaseRound: -1}
			j.view.ID, j.view.Workers = "j"+strconv.Itoa(i), []int{1, 2, 4, 8, 16}[rng.IntN(5)]
			if j.view.Workers <= len(nodes)*k {
				jobs = append(jobs, j)
			}
		}
		c.active = jobs
		total := len(nodes) * k
		first := randomPlan(rng, jobs, total)
		run, _ := c.placeRun(newPlacer(nodes), first, jobs, &policy.Plan{Run: ids(first)})
		for _, j := range run {
			j.devices, j.next, j.leaseRound = j.next, nil, 0
		}
		c.round = 1
		plan := randomPlan(rng, jobs, total)
		run, np := c.placeRun(newPlacer(nodes), plan, jobs, &policy.Plan{Run: ids(plan)})
		if len(run) != len(plan) || strings.Contains(np.Note, "dropped") {
			t.Fatalf("plan %v on %dx%d: placed %v (%s)", ids(plan), len(nodes), k, ids(run), np.Note)
		}
	}
}

func placeOnce(seed uint64, perm bool) (string, []string) {
	rng := rand.New(rand.NewPCG(seed, 7))
	c, pc := randomCase(rng, false, true, false)
	plan := pc.plan
	if perm {
		plan = slices.Clone(plan)
		rand.New(rand.NewPCG(seed, 9)).Shuffle(len(plan), func(a, b int) { plan[a], plan[b] = plan[b], plan[a] })
	}
	run, np := c.placeRun(newPlacer(pc.nodes), plan, pc.jobs, &policy.Plan{Run: ids(plan)})
	var shape []string
	for _, j := range run {
		shape = append(shape, fmt.Sprintf("%d %s %v", j.view.Workers, j.node, j.next))
	}
	sort.Strings(shape)
	var exact []string
	for _, j := range run {
		exact = append(exact, fmt.Sprintf("%s %v", j.view.ID, j.next))
	}
	return fmt.Sprint(exact, np.Run, np.Note), shape
}

// TestPlace_SameInputsSameOutput: placing the same case twice gives the same
// grants, run list and note.
func TestPlace_SameInputsSameOutput(t *testing.T) {
	for seed := range uint64(500) {
		a, _ := placeOnce(seed, false)
		b, _ := placeOnce(seed, false)
		if a != b {
			t.Fatalf("seed %d: %s then %s", seed, a, b)
		}
	}
}

// TestPlace_PlanOrderOnlyRelabelsEqualGangs: permuting the plan's order
// changes at most which of two equal gangs (same width, same node binding)
// gets which devices: the set of grants by width is the same.
func TestPlace_PlanOrderOnlyRelabelsEqualGangs(t *testing.T) {
	for seed := range uint64(500) {
		_, a := placeOnce(seed, false)
		_, b := placeOnce(seed, true)
		if !slices.Equal(a, b) {
			t.Fatalf("seed %d: %v then, permuted, %v", seed, a, b)
		}
	}
}

// TestPlace_KeepsDevicesAcrossRounds: a job that ran in the previous round
// and is planned again keeps exactly its devices unless the plan did not fit
// with them (a repack, named in the plan's note).
func TestPlace_KeepsDevicesAcrossRounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		c, pc := randomCase(rng, true, false, false)
		_, np := c.placeRun(newPlacer(pc.nodes), pc.plan, pc.jobs, &policy.Plan{Run: ids(pc.plan)})
		if strings.Contains(np.Note, "repacked") {
			continue // repaired: jobs may move
		}
		for _, j := range pc.plan {
			if j.next != nil && j.leaseRound == 0 && !sameGrant(j.devices, j.next) {
				t.Fatalf("job %s moved from %v to %v", j.view.ID, j.devices, j.next)
			}
		}
	}
}

// membershipRun drives a dynamic Core through a random sequence of
// registrations, node joins, leaves and updates, progress and ticks, checks
// every round's RUN leases against the membership of that moment, and
// returns the rounds as JSON.
func membershipRun(t *testing.T, seed uint64, runs *int, pol string, steps int) string {
	rng := rand.New(rand.NewPCG(seed, 11))
	p, err := policy.New(pol, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCore(Config{Dynamic: true, RoundSeconds: 1000}, p)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	now, seq := 0.0, map[string]uint64{}
	for step := range steps {
		now += 100
		switch r := rng.IntN(10); {
		case r < 2:
			id := "j" + strconv.Itoa(step)
			reg := &protocol.Register{V: protocol.Version, Job: id, Model: "ResNet-18", Workers: []int{1, 1, 2, 4, 8, 12}[rng.IntN(6)],
				BatchSize: 32, DatasetSize: 50000, TotalSteps: 100000, Throughput: 10}
			if rng.IntN(6) == 0 {
				reg.Node, reg.Workers = "n"+strconv.Itoa(rng.IntN(5)), 1+rng.IntN(2)
			}
			if err := c.Register(now, reg); err != nil {
				t.Fatal(err)
			}
		case r < 4:
			_ = c.JoinNode(topology.Node{Name: "n" + strconv.Itoa(rng.IntN(5)), GPUs: []int{2, 4, 8}[rng.IntN(3)]})
		case r < 5:
			_ = c.LeaveNode("n" + strconv.Itoa(rng.IntN(5)))
		case r < 7:
			for _, st := range c.Jobs() {
				if st.State == string(Active) && len(st.GPUs) > 0 {
					seq[st.Job]++
					e := &protocol.Event{V: protocol.Version, Type: protocol.EventProgress, Job: st.Job, Seq: seq[st.Job],
						Steps: 100, Elapsed: 100, StepsDone: st.StepsDone + 100, TotalSteps: 100000, BatchSize: 32, Throughput: 10}
					if _, err := c.Apply(now, e); err != nil {
						t.Fatal(err)
					}
				}
			}
		default:
			round, err := c.Tick(now)
			if err != nil {
				t.Fatal(err)
			}
			checkLeases(t, c.Nodes(), round)
			for _, l := range round.Leases {
				if l.Action == protocol.Run && len(l.Devices) > 0 {
					*runs++
				}
			}
			b, _ := json.Marshal(round)
			out.Write(b)
		}
	}
	return out.String()
}

func checkLeases(t *testing.T, nodes []topology.Node, r *Round) {
	t.Helper()
	cl := topology.Cluster{Nodes: nodes}
	off := cl.Offsets()
	ids := map[int]string{}
	for _, l := range r.Leases {
		if l.Action != protocol.Run {
			continue
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("round %d: %v", r.Index, err)
		}
		var want []int
		for _, nd := range l.Devices {
			i := cl.Index(nd.Node)
			if i < 0 {
				t.Fatalf("round %d: job %s granted devices on node %s, not a member", r.Index, l.Job, nd.Node)
			}
			for _, d := range nd.Devices {
				if d >= nodes[i].GPUs {
					t.Fatalf("round %d: job %s granted device %d of node %s (%d GPUs)", r.Index, l.Job, d, nd.Node, nodes[i].GPUs)
				}
				want = append(want, off[i]+d)
			}
		}
		if !slices.Equal(want, l.Workers) {
			t.Fatalf("round %d: job %s: workers %v, devices %v make %v", r.Index, l.Job, l.Workers, l.Devices, want)
		}
		for _, w := range l.Workers {
			if o, dup := ids[w]; dup {
				t.Fatalf("round %d: GPU %d given to %s and %s", r.Index, w, o, l.Job)
			}
			ids[w] = l.Job
		}
	}
}

// TestCore_RandomMembershipLeasesMatchTheNodes: under random joins, leaves,
// node updates, registrations (some resident) and progress, under Gavel and
// Shockwave (whose market re-solves as the nodes change), every round's
// RUN leases name only devices of current members, Workers are exactly the
// cluster-wide ids of Devices, no GPU is granted twice, and the same inputs
// give the same rounds byte for byte.
func TestCore_RandomMembershipLeasesMatchTheNodes(t *testing.T) {
	runs := 0
	for seed := range uint64(43) {
		pol, steps := "gavel", 200
		if seed >= 40 { // Shockwave's market, slower, on shorter sequences
			pol, steps = "shockwave", 80
		}
		a, b := membershipRun(t, seed, &runs, pol, steps), membershipRun(t, seed, &runs, pol, steps)
		if a != b {
			t.Fatalf("seed %d (%s): two runs of the same inputs differ", seed, pol)
		}
	}
	if runs < 500 {
		t.Fatalf("only %d RUN leases in all: the sequences test too little", runs)
	}
	t.Logf("%d RUN leases checked", runs)
}

// TestRepair_EvictsTheFewestKeptJobs: on two nodes of 4, node-0 holding two
// 1-GPU jobs and node-1 one 2-GPU job, a planned 4-GPU gang evicts the one
// job of node-1 (which moves to node-0's free devices) rather than the two
// of node-0; the note names the moved job.
func TestRepair_EvictsTheFewestKeptJobs(t *testing.T) {
	nodes := topology.Uniform(2, 4).Nodes
	c, err := NewCore(Config{Cluster: topology.Cluster{Nodes: nodes}}, gavelForTest())
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string, w int, node string, devs ...int) *job {
		j := &job{state: Active, leaseRound: -1}
		j.view.ID, j.view.Workers = id, w
		if node != "" {
			j.leaseRound, j.devices = 0, []protocol.NodeDevices{{Node: node, Devices: devs}}
		}
		return j
	}
	a, b, cc, w := mk("a", 1, "node-0", 0), mk("b", 1, "node-0", 1), mk("c", 2, "node-1", 1, 2), mk("w", 4, "")
	c.active, c.round = []*job{a, b, cc, w}, 1
	plan := []*job{a, b, cc, w}
	run, np := c.placeRun(newPlacer(nodes), plan, plan, &policy.Plan{Run: ids(plan)})
	if len(run) != 4 {
		t.Fatalf("placed %v (%s)", ids(run), np.Note)
	}
	if !sameGrant(a.next, a.devices) || !sameGrant(b.next, b.devices) {
		t.Errorf("a or b moved: %v %v", a.next, b.next)
	}
	if fmt.Sprint(w.next) != "[{node-1 [0 1 2 3]}]" || fmt.Sprint(cc.next) != "[{node-0 [2 3]}]" {
		t.Errorf("w %v, c %v", w.next, cc.next)
	}
	if np.Note != "repair: repacked the nodes, moving [c]" {
		t.Errorf("note %q", np.Note)
	}
}
