package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/policy"
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

// TestService_ALogWrittenForAnotherClusterIsResized: a coordinator
// restarted on the same log with another cluster (same GPU count) no longer
// refuses to run (issue 13): it appends a cluster record and the fold
// applies it as membership changes.
func TestService_ALogWrittenForAnotherClusterIsResized(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Cluster = topology.Uniform(2, 2) })
	e.stopService()
	e.scfg.Core.Cluster, e.scfg.Core.GPUs = topology.Uniform(4, 1), 0
	e.startService()
	eventually(t, 10*time.Second, "four nodes of one GPU", func() bool {
		st := status(t, e.client(), e.subj)
		if len(st.Nodes) != 4 || st.GPUs != 4 {
			return false
		}
		for _, n := range st.Nodes {
			if n.GPUs != 1 {
				return false
			}
		}
		return true
	})
}

// TestService_ResidentRegistrationsAreCheckedAgainstTheNodes: on a static
// cluster, a registration resident on a node the cluster lacks, or wider
// than its node or its visible devices, is rejected with a reply naming the
// problem and leaves no job; one on an existing node runs there only.
func TestService_ResidentRegistrationsAreCheckedAgainstTheNodes(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Cluster = topology.Uniform(2, 2) })
	nc := e.client()
	bad := []struct {
		node    string
		workers int
		visible []int
		want    string
	}{
		{"node-9", 1, nil, "node not in the cluster"},
		{"node-1", 3, nil, "its node node-1 has 2"},
		{"node-1", 2, []int{1}, "it sees 1 on node node-1"},
	}
	for _, c := range bad {
		r := newJob("r", c.workers)
		r.Node, r.Visible = c.node, c.visible
		rep := register(t, nc, e.subj, r)
		if rep.Error == nil || rep.Error.Code != protocol.CodeRejected || !strings.Contains(rep.Error.Message, c.want) {
			t.Errorf("%+v: reply %+v, want a rejection mentioning %q", c, rep.Error, c.want)
		}
	}
	if st := status(t, nc, e.subj); len(st.Jobs) != 0 {
		t.Fatalf("rejected registrations left jobs: %+v", st.Jobs)
	}
	r := newJob("r", 1)
	r.Node, r.Visible = "node-1", []int{1}
	leases := watchLeases(t, nc, e.subj.Lease("r"))
	if rep := register(t, nc, e.subj, r); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	eventually(t, 10*time.Second, "a RUN lease", func() bool {
		for _, l := range leases.all() {
			if l.Action == protocol.Run {
				if len(l.Devices) != 1 || l.Devices[0].Node != "node-1" || l.Devices[0].Devices[0] != 1 || l.Workers[0] != 3 {
					t.Fatalf("lease %+v: want node-1 device 1 (GPU 3)", l)
				}
				return true
			}
		}
		return false
	})
}

// TestConfigRecord_CarriesTheCluster: the log's configuration record keeps
// a static cluster (and the dynamic flag), a replay builds a Core on the same
// nodes, and a flat pool records no cluster (logs written before nodes
// existed read the same).
func TestConfigRecord_CarriesTheCluster(t *testing.T) {
	cl := topology.Cluster{Nodes: []topology.Node{{Name: "a", GPUs: 8, Type: "a100"}, {Name: "b", GPUs: 4}}}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Cluster: cl, RoundSeconds: 60}, "a:8:a100,b:4"},
		{Config{GPUs: 4, RoundSeconds: 60}, "1x4"},
		{Config{Dynamic: true, RoundSeconds: 60}, ""},
	} {
		if err := c.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		rec, err := newConfigRecord(c.cfg, "gavel", policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if (rec.Cluster == nil) != (c.want != "a:8:a100,b:4") || rec.Dynamic != c.cfg.Dynamic {
			t.Errorf("%s: record cluster %v, dynamic %v", c.want, rec.Cluster, rec.Dynamic)
		}
		data, _ := json.Marshal(rec)
		back, err := decodeConfigRecord(data)
		if err != nil {
			t.Fatal(err)
		}
		core, err := back.core()
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if len(core.Nodes()) > 0 {
			got = topology.Cluster{Nodes: core.Nodes()}.String()
		}
		if got != c.want || core.Dynamic() != c.cfg.Dynamic || !sameConfig(back, &rec) {
			t.Errorf("replayed core on %q (dynamic %v), want %q", got, core.Dynamic(), c.want)
		}
	}
}
