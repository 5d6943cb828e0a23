package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
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

// TestStatus_LiveJobIsListedUnderItsNode: a 2-GPU job of the Go SDK on a
// `coordinator --nodes 2x2` is listed under the node it was granted, whose
// heading shows both devices in use.
func TestStatus_LiveJobIsListedUnderItsNode(t *testing.T) {
	url := startCoordinator(t, "--nodes", "2x2", "--data-dir", t.TempDir(), "--policy", "shockwave", "--log-level", "warn")
	statusEventually(t, "--nats-url", url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	job, err := sdk.Register(ctx, sdk.WithURL(url), sdk.WithJobID("pair"), sdk.WithModel("ResNet-18"), sdk.WithWorkers(2),
		sdk.WithBatchSize(32), sdk.WithDatasetSize(50000), sdk.WithEpochs(100), sdk.WithThroughput(10),
		sdk.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		src := sdk.SourceFunc[int](func(context.Context) (int, error) { time.Sleep(5 * time.Millisecond); return 1, nil })
		for _, err := range sdk.Steps(ctx, job, src) {
			if err != nil {
				return
			}
		}
	}()
	defer func() { cancel(); <-stepped }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, out, errOut := runCLI("status", "--nats-url", url, "--timeout", "500ms")
		i := strings.Index(out, "· 2 in use")
		if i >= 0 && strings.Contains(out[i:strings.Index(out, "jobs holding no devices")], "pair") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never showed under its node:\n%s%s", out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStatus_LimitListsThatManyJobsAndSaysHowManyThereAre: `status --limit
// 1` against a coordinator with three jobs lists one and says it is one of
// three; a negative limit is refused before anything is asked.
func TestStatus_LimitListsThatManyJobsAndSaysHowManyThereAre(t *testing.T) {
	if code, _, errOut := runCLI("status", "--limit", "-1"); code == 0 || !strings.Contains(errOut, "--limit: -1 is negative") {
		t.Errorf("--limit -1: exit %d, %s", code, errOut)
	}
	url := startCoordinator(t, "--nodes", "1x2", "--data-dir", t.TempDir(), "--policy", "shockwave", "--log-level", "warn")
	statusEventually(t, "--nats-url", url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, id := range []string{"one", "two", "three"} {
		job, err := sdk.Register(ctx, sdk.WithURL(url), sdk.WithJobID(id), sdk.WithModel("ResNet-18"),
			sdk.WithBatchSize(32), sdk.WithDatasetSize(50000), sdk.WithEpochs(100), sdk.WithThroughput(10),
			sdk.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer job.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out := statusEventually(t, "--nats-url", url, "--limit", "1")
		if strings.Contains(out, "1 of 3 jobs listed") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--limit 1:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out := statusEventually(t, "--nats-url", url); strings.Contains(out, "jobs listed") {
		t.Errorf("no limit, three jobs:\n%s", out)
	}
}
