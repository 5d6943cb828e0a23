package main

import (
	"strings"
	"testing"
)

// TestSimulate_ArrivalGapDefaultIsTheOld40Seconds: --arrival-gap 40 gives
// the bytes of a run without the flag (existing seeds keep their traces),
// and a shorter gap packs the same jobs into less time, so the makespan
// (and the JSON) changes.
func TestSimulate_ArrivalGapDefaultIsTheOld40Seconds(t *testing.T) {
	args := []string{"simulate", "--generate", "30", "--seed", "4", "--gpus", "8", "--policy", "gavel", "--format", "json"}
	code, plain, e := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	code, forty, e := runCLI(append(args, "--arrival-gap", "40")...)
	if code != 0 || forty != plain {
		t.Fatalf("--arrival-gap 40 (exit %d, %s) differs from the default:\n%s\n%s", code, e, forty, plain)
	}
	code, dense, e := runCLI(append(args, "--arrival-gap", "2")...)
	if code != 0 {
		t.Fatalf("--arrival-gap 2: exit %d: %s", code, e)
	}
	if dense == plain {
		t.Fatal("--arrival-gap 2 gave the output of the 40 s default")
	}
}

// TestSimulate_ArrivalGapRejectsNonPositive: a gap that is not a positive,
// finite number of seconds is a usage error naming the flag, with no output.
func TestSimulate_ArrivalGapRejectsNonPositive(t *testing.T) {
	for _, gap := range []string{"0", "-1", "NaN", "+Inf", "ten"} {
		code, out, e := runCLI("simulate", "--generate", "10", "--gpus", "4", "--policy", "gavel", "--arrival-gap", gap)
		if code != 2 || out != "" || !strings.Contains(e, "arrival-gap") {
			t.Errorf("--arrival-gap %s: exit %d, stdout %q, stderr %q; want exit 2 naming the flag", gap, code, out, e)
		}
	}
}
