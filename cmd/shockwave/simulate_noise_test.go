package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimulate_BadNoiseFlagsAreOneLineAndExitCode2 checks the workload
// noise flags' ranges.
func TestSimulate_BadNoiseFlagsAreOneLineAndExitCode2(t *testing.T) {
	for _, args := range [][]string{
		{"--schedule-jitter", "-1"}, {"--throughput-noise", "NaN"}, {"--round-noise", "3"}, {"--cancel-rate", "1.5"},
	} {
		code, out, errOut := runCLI(append([]string{"simulate", "--generate", "5"}, args...)...)
		if code != 2 || out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	bad := writeFile(t, "bad.jsonl", `{"v":1,"job_type":"LM (batch size 20)","scale_factor":1,"mode":"gns","priority":1,"arrival_s":0,"total_steps":5970,"batch_sizes":[20],"throughputs":[50]}`+"\n")
	code, _, errOut := runCLI("simulate", "--trace", bad)
	if code != 2 || !strings.Contains(errOut, "bad.jsonl:1") || !strings.Contains(errOut, "batch_sizes") {
		t.Errorf("bad profile file: exit %d, stderr %q", code, errOut)
	}
}

// TestSimulate_ExportedProfilesReplayAsATrace exports the profiles of a
// noisy run and replays them with --trace FILE.jsonl, with a forecast
// report that breaks the errors down by slice.
func TestSimulate_ExportedProfilesReplayAsATrace(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "run.jsonl")
	code, _, errOut := runCLI("simulate", "--generate", "20", "--gpus", "8", "--policy", "gavel",
		"--schedule-jitter", "5", "--throughput-noise", "0.1", "--round-noise", "0.05", "--cancel-rate", "0.1", "--export-profiles", prof)
	if code != 0 {
		t.Fatalf("export: %s", errOut)
	}
	raw, err := os.ReadFile(prof)
	if err != nil || bytes.Count(raw, []byte("\n")) != 20 {
		t.Fatalf("exported %d lines (%v)", bytes.Count(raw, []byte("\n")), err)
	}
	rep := filepath.Join(dir, "fc.json")
	code, out, errOut := runCLI("simulate", "--trace", prof, "--gpus", "8", "--policy", "shockwave,gavel", "--forecast-report", rep)
	if code != 0 {
		t.Fatalf("replay: %s", errOut)
	}
	for _, want := range []string{"by slice", "first of recipe", "no finished peer", "peer finished", "change ahead"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}
