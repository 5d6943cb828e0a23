package coordinator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// TestService_LeasesNameNodeDevicesAndStatusListsNodes: a coordinator on two
// nodes of 2 GPUs grants two 2-GPU gangs one node each; the published RUN
// leases name the node and local devices, and the status reply lists the
// nodes with their devices in use and each job's devices.
func TestService_LeasesNameNodeDevicesAndStatusListsNodes(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Cluster = topology.Uniform(2, 2) })
	nc := e.client()
	la, lb := watchLeases(t, nc, e.subj.Lease("a")), watchLeases(t, nc, e.subj.Lease("b"))
	register(t, nc, e.subj, newJob("a", 2))
	register(t, nc, e.subj, newJob("b", 2))
	first := func(w *leaseLog) *protocol.Lease {
		for _, l := range w.all() {
			if l.Action == protocol.Run {
				return &l
			}
		}
		return nil
	}
	eventually(t, 10*time.Second, "both jobs get a RUN lease", func() bool { return first(la) != nil && first(lb) != nil })
	a, b := first(la), first(lb)
	for _, l := range []*protocol.Lease{a, b} {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		if len(l.Devices) != 1 || len(l.Devices[0].Devices) != 2 {
			t.Fatalf("lease %+v: want 2 devices of one node", l)
		}
	}
	if a.Devices[0].Node == b.Devices[0].Node {
		t.Errorf("both gangs on %s", a.Devices[0].Node)
	}
	st := status(t, nc, e.subj)
	if len(st.Nodes) != 2 || st.GPUs != 4 || st.Nodes[0].Name != "node-0" {
		t.Fatalf("status nodes %+v, gpus %d", st.Nodes, st.GPUs)
	}
	eventually(t, 10*time.Second, "status shows both nodes in use", func() bool {
		st = status(t, nc, e.subj)
		ra, _ := jobRow(st, "a")
		return st.Nodes[0].Used == 2 && st.Nodes[1].Used == 2 && len(ra.Devices) == 1
	})
}

// TestService_RefusesALogWrittenForAnotherCluster: a coordinator restarted
// on the same log with another cluster (same GPU count) refuses to run, and
// says which cluster the log was written with.
func TestService_RefusesALogWrittenForAnotherCluster(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Cluster = topology.Uniform(2, 2) })
	e.stopService()
	nc, err := e.emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := e.scfg
	cfg.Core.Cluster, cfg.Core.GPUs = topology.Uniform(4, 1), 0
	svc, err := NewService(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Run(ctx); err == nil || !strings.Contains(err.Error(), "cluster 2x2") {
		t.Fatalf("run on another cluster's log: %v", err)
	}
}
