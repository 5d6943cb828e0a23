package main

import (
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestStatus_GroupsJobsByNode: the table has a heading per node with its
// GPUs, type and devices in use, lists each job under every node it holds
// devices on with its local indices there, and lists the jobs holding none
// (a resident job names its node) last.
func TestStatus_GroupsJobsByNode(t *testing.T) {
	r := &protocol.StatusReply{V: protocol.Version, Policy: "gavel", GPUs: 8, RoundSeconds: 60, Round: 3,
		Nodes: []protocol.NodeInfo{{Name: "node-0", GPUs: 4, Type: "v100", Used: 4}, {Name: "node-1", GPUs: 4, Used: 2}},
		Jobs: []protocol.JobInfo{
			{Job: "wide", State: "active", Model: "m", Workers: 6, LastRun: 2, GPUs: []int{0, 1, 2, 3, 4, 5},
				Devices: []protocol.NodeDevices{{Node: "node-0", Devices: []int{0, 1, 2, 3}}, {Node: "node-1", Devices: []int{0, 1}}}},
			{Job: "idle", State: "active", Model: "m", Workers: 1, LastRun: -1, Node: "node-1"},
		}}
	var b strings.Builder
	if err := printStatus(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"8 GPUs on 2 nodes", "node-0 · 4 GPUs · v100 · 4 in use", "node-1 · 4 GPUs · 2 in use",
		"jobs holding no devices", "resident on node-1"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	n0, n1, none := strings.Index(out, "node-0 ·"), strings.Index(out, "node-1 ·"), strings.Index(out, "jobs holding no devices")
	sec0, sec1, secNone := out[n0:n1], out[n1:none], out[none:]
	if !strings.Contains(sec0, "0 1 2 3 4 5  0 1 2 3\n") || !strings.Contains(sec1, "0 1 2 3 4 5  0 1\n") || strings.Contains(secNone, "wide") {
		t.Errorf("wide is not listed under both nodes with its local devices:\n%s", out)
	}
	if !strings.Contains(secNone, "idle") || strings.Contains(sec0+sec1, "idle") {
		t.Errorf("idle is not listed last:\n%s", out)
	}
}

// TestCoordinator_NodesFlagMakesANodeCluster: `coordinator --nodes 2x2`
// schedules 4 GPUs on two nodes, and status shows both.
func TestCoordinator_NodesFlagMakesANodeCluster(t *testing.T) {
	url := startCoordinator(t, "--nodes", "2x2", "--data-dir", t.TempDir(), "--policy", "gavel", "--log-level", "warn")
	out := statusEventually(t, "--nats-url", url)
	for _, want := range []string{"4 GPUs on 2 nodes", "node-0 · 2 GPUs · 0 in use", "node-1 · 2 GPUs", "JOB"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
}
