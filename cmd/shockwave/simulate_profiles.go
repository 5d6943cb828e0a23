package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// readJobs reads --trace: the original's TAB-separated format, or per-job
// profiles in JSON Lines when the name ends in .jsonl.
func readJobs(path string) ([]workload.Spec, error) {
	if strings.HasSuffix(path, ".jsonl") {
		return workload.ReadProfilesFile(path)
	}
	return workload.ReadTraceFile(path)
}

// writeProfiles writes the realized per-job profiles of res into path
// (--export-profiles), atomically, so a failed write leaves no partial file.
func writeProfiles(path string, res *sim.Result, stderr io.Writer) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("--export-profiles: %w", err)
	}
	err = workload.WriteProfiles(f, res.Profiles)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("--export-profiles: %w", err)
	}
	fmt.Fprintf(stderr, "profiles of %d jobs (%s run) written to %s\n", len(res.Profiles), res.Policy, path)
	return nil
}
