package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestAgentCommands_BadFlagsAreRefusedWithExitCode2: bad input to agent,
// submit, cancel, creds and the cluster demo is refused before anything
// connects, naming what was wrong.
func TestAgentCommands_BadFlagsAreRefusedWithExitCode2(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"agent", "--node", "a.b"}, "node name"},
		{[]string{"agent", "--node", "n", "--gpus", "5000"}, "--gpus"},
		{[]string{"agent", "--node", "n", "--kill-grace", "0s"}, "kill-grace"},
		{[]string{"agent", "--node", "n", "--job-socket-mode", "0999"}, "--job-socket-mode"},
		{[]string{"agent", "--node", "n", "--job-socket-mode", "01777"}, "--job-socket-mode"},
		{[]string{"submit"}, "no command"},
		{[]string{"submit", "--workers", "0", "--", "true"}, "workers"},
		{[]string{"submit", "--env", "A", "--", "true"}, "KEY=VALUE"},
		{[]string{"submit", "--env", "RANK=3", "--", "true"}, "reserved"},
		{[]string{"submit", "--workers", "2", "--ranks-per-node", "3", "--", "true"}, "ranks_per_node"},
		{[]string{"submit", "--max-retries", "-1", "--", "true"}, "max_retries"},
		{[]string{"cancel"}, "exactly one JOB"},
		{[]string{"cancel", "a.b"}, "job id"},
		{[]string{"creds", "issue", "--agent", "--admin", "x"}, "no credentials authority"},
		{[]string{"demo", "--nodes", "0x2"}, "--nodes"},
		{[]string{"demo", "--nodes", "2x2", "--round", "10ms"}, "--round"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: status %d, %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

func TestNewJobID_IsReadableAndUnique(t *testing.T) {
	a, b := newJobID("ResNet 50 / run#1", "x"), newJobID("", "/usr/bin/python3")
	if !strings.HasPrefix(a, "ResNet-50-run-1-") || !strings.HasPrefix(b, "python3-") {
		t.Errorf("ids %q %q", a, b)
	}
	if newJobID("x", "") == newJobID("x", "") {
		t.Errorf("two ids of one name are equal")
	}
}

// TestMain lets the test binary serve as the cluster demo's training job:
// the in-process demo below starts os.Executable() demo-train.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "demo-train" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestClusterDemo_InProcessCoordinatorAndAgentsFinishEveryJob runs the
// cluster demo's coordinator service and agents in this process (so that
// `go test -race` checks them) with real demo-train processes.
func TestClusterDemo_InProcessCoordinatorAndAgentsFinishEveryJob(t *testing.T) {
	var out, errb bytes.Buffer
	err := runClusterDemo([]string{"--nodes", "2x1", "--jobs", "3", "--train", "builtin", "--timeout", "90s"}, &out, &errb)
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errb.String())
	}
	if n := strings.Count(out.String(), " completed "); n != 3 {
		t.Errorf("%d jobs completed, want 3:\n%s", n, out.String())
	}
}
