package main

import (
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
