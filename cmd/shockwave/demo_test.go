package main

import (
	"strings"
	"testing"
)

func TestDemo_SmallRunPrintsRoundsAndASummary(t *testing.T) {
	code, out, errOut := runCLI("demo", "--jobs", "3", "--gpus", "2", "--round", "500ms", "--work", "0.3", "--policy", "shockwave")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	for _, want := range []string{"shockwave demo: 3 jobs on 2 virtual GPUs", "round   0", "all 3 jobs done", "makespan", "average JCT", "gns-0", "acc-1", "sta-2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	t.Log("\n" + out)
}

func TestDemo_BadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--jobs", "0"}, {"--gpus", "-1"}, {"--round", "1ms"}, {"--policy", "nope"}, {"--work", "0"}} {
		code, _, errOut := runCLI(append([]string{"demo"}, args...)...)
		if code != 2 || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}
