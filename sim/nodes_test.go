package sim_test

import (
	"bytes"
	"testing"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/report"
	"github.com/shockwave-sched/shockwave/topology"
)

// TestRun_OneNodeClusterIsTheFlatPool: a cluster of one node of N GPUs
// gives the flat pool's results byte for byte, for every policy.
func TestRun_OneNodeClusterIsTheFlatPool(t *testing.T) {
	jobs, thr := generated(t, 60, 7)
	for _, p := range allPolicies {
		var out [2]bytes.Buffer
		for i, cl := range []topology.Cluster{{}, topology.Flat(16)} {
			r, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 16, Cluster: cl, Policy: p})
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if err := report.WriteJSON(&out[i], []*sim.Result{r}); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
			t.Errorf("%s: one node of 16 differs from the flat pool of 16", p)
		}
	}
}

// TestRun_NodesPlaceEveryGangOnOneNodeAndCompleteEveryJob: on 4 nodes of 4
// GPUs every policy completes every job, no round grants a device twice,
// and every gang of up to 4 GPUs runs on one node (widths 1-8 in the trace;
// 8-GPU gangs on exactly two nodes).
func TestRun_NodesPlaceEveryGangOnOneNodeAndCompleteEveryJob(t *testing.T) {
	jobs, thr := generated(t, 60, 9)
	for _, p := range allPolicies {
		checked := 0
		cfg := sim.Config{Jobs: jobs, Throughputs: thr, Cluster: topology.Uniform(4, 4), Policy: p}
		cfg.OnPlan = func(r *coordinator.Round) {
			used := map[int]bool{}
			for _, l := range r.Leases {
				if l.Action != protocol.Run {
					continue
				}
				for _, w := range l.Workers {
					if used[w] {
						t.Fatalf("%s round %d: GPU %d granted twice", p, r.Index, w)
					}
					used[w] = true
				}
				if want := (len(l.Workers) + 3) / 4; len(l.Devices) != want {
					t.Fatalf("%s round %d: %s of %d GPUs on %d nodes: %v", p, r.Index, l.Job, len(l.Workers), len(l.Devices), l.Devices)
				}
				checked++
			}
		}
		res, err := sim.Run(cfg)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for i, jct := range res.JCT {
			if !(jct > 0) {
				t.Errorf("%s: job %d has JCT %v", p, i, jct)
			}
		}
		if checked == 0 || res.GPUs != 16 || res.Nodes != "4x4" {
			t.Errorf("%s: %d leases checked, %d GPUs, nodes %q", p, checked, res.GPUs, res.Nodes)
		}
	}
}
