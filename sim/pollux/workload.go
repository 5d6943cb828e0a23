package pollux

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Header is the first line of a Pollux workload CSV (spec §1.1).
const Header = "name,time,application,num_replicas,batch_size"

// WorkloadRow is one job of a Pollux workload.
type WorkloadRow struct {
	Name        string
	Time        int // submission, seconds from the start
	Application string
	Replicas    int // TunedJobs num_replicas
	BatchSize   int // TunedJobs batch_size
}

// IsWorkload reports whether data starts with the Pollux workload header.
func IsWorkload(data []byte) bool {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return strings.TrimSpace(strings.TrimPrefix(string(line), "\ufeff")) == Header
}

// ParseWorkload reads a Pollux workload CSV. Every row must name a known
// application with a width in [1, 64] and a batch size the application can
// run with at that width; times must be non-negative and non-decreasing and
// names unique. Errors name the line and field.
func ParseWorkload(r io.Reader, apps Apps) ([]WorkloadRow, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 5
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("pollux workload: header: %w", err)
	}
	if strings.TrimPrefix(strings.Join(head, ","), "\ufeff") != Header {
		return nil, fmt.Errorf("pollux workload: header %q, want %q", strings.Join(head, ","), Header)
	}
	var out []WorkloadRow
	seen := map[string]bool{}
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("pollux workload: %w", err)
		}
		w, err := parseRow(rec, apps)
		if err != nil {
			return nil, fmt.Errorf("pollux workload line %d: %w", line, err)
		}
		if seen[w.Name] {
			return nil, fmt.Errorf("pollux workload line %d: field 1 (name): duplicate %q", line, w.Name)
		}
		if len(out) > 0 && w.Time < out[len(out)-1].Time {
			return nil, fmt.Errorf("pollux workload line %d: field 2 (time): %d before the previous row's %d", line, w.Time, out[len(out)-1].Time)
		}
		seen[w.Name] = true
		out = append(out, w)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pollux workload: no jobs")
	}
	return out, nil
}

func parseRow(rec []string, apps Apps) (WorkloadRow, error) {
	w := WorkloadRow{Name: rec[0], Application: rec[2]}
	if w.Name == "" {
		return w, fmt.Errorf("field 1 (name): empty")
	}
	var err error
	if w.Time, err = strconv.Atoi(rec[1]); err != nil || w.Time < 0 || w.Time > 1e9 {
		return w, fmt.Errorf("field 2 (time): %q is not a submission time in seconds", rec[1])
	}
	app, ok := apps[w.Application]
	if !ok {
		return w, fmt.Errorf("field 3 (application): unknown application %q", w.Application)
	}
	if w.Replicas, err = strconv.Atoi(rec[3]); err != nil || w.Replicas < 1 || w.Replicas > 64 {
		return w, fmt.Errorf("field 4 (num_replicas): %q is not a width in [1, 64]", rec[3])
	}
	if w.BatchSize, err = strconv.Atoi(rec[4]); err != nil || w.BatchSize < app.InitBsz || w.BatchSize > app.MaxBsz {
		return w, fmt.Errorf("field 5 (batch_size): %q is not in %s's range [%d, %d]", rec[4], app.Name, app.InitBsz, app.MaxBsz)
	}
	if a, _ := fixedBatch(app, w.BatchSize, w.Replicas); a < app.MinLocal {
		return w, fmt.Errorf("field 5 (batch_size): %d over %d replicas is below %s's smallest per-GPU batch size %d", w.BatchSize, w.Replicas, app.Name, app.MinLocal)
	}
	return w, nil
}
