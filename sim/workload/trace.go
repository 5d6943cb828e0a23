package workload

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mode is a job's dynamic-adaptation mode (spec §1 field 8).
type Mode string

// Adaptation modes (spec §1, §2.3, §2.5).
const (
	// Static jobs never change their batch size.
	Static Mode = "static"
	// Accordion jobs switch between the initial batch size and the model's
	// maximum according to "critical regimes".
	Accordion Mode = "accordion"
	// GNS jobs double their batch size at scheduled epochs (gradient noise
	// scale).
	GNS Mode = "gns"
)

// ParseMode accepts "static", "accordion" or "gns".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Static, Accordion, GNS:
		return m, nil
	}
	return "", fmt.Errorf("unknown mode %q (want static, accordion or gns)", s)
}

// Spec is one job of a trace: one line of the original's trace format
// (spec §1). Command, WorkingDir, NumStepsArg, NeedsDataDir, PriorityWeight
// and SLO are carried for physical runs and round trips; the simulator does
// not use them.
type Spec struct {
	ID           int    // 0-based line index; JCT and FTF lists are indexed by it
	JobType      string // field 1, "<Model> (batch size <bs>)"
	Model        string // parsed from JobType
	BatchSize    int    // initial batch size bs0, parsed from JobType
	Command      string // field 2
	WorkingDir   string // field 3
	NumStepsArg  string // field 4
	NeedsDataDir bool   // field 5 (0/1)
	// TotalSteps (field 6) is the training iterations at the initial batch
	// size, all sf workers together.
	TotalSteps     int64
	ScaleFactor    int     // field 7, GPUs the job gang-schedules on
	Mode           Mode    // field 8
	PriorityWeight float64 // field 9
	SLO            float64 // field 10; -1 means none
	// Duration (field 11) is the isolated run time at the initial batch
	// size in seconds; it only derived TotalSteps. The simulator uses the
	// adapted isolated duration of the profile instead (spec §2.4).
	Duration float64
	Arrival  float64 // field 12, seconds from the start of the trace
	// Profile, when set, is the job's own per-epoch batch size and
	// throughput (profiles.go); it replaces the table and the rules.
	Profile *JobProfile
}

// traceFields names the 12 TAB-separated fields of a trace line (spec §1).
var traceFields = [...]string{
	"job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
	"total_steps", "scale_factor", "mode", "priority_weight", "SLO", "duration", "arrival_time",
}

// TraceError is a problem with one line of a trace. Field is 1-based, or 0
// when the problem concerns the whole line.
type TraceError struct {
	File  string
	Line  int
	Field int
	Msg   string
}

func (e *TraceError) Error() string {
	if e.Field == 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: field %d (%s): %s", e.File, e.Line, e.Field, traceFields[e.Field-1], e.Msg)
}

// ReadTraceFile reads a trace file (ParseTrace); errors name the file by
// its base name.
func ReadTraceFile(path string) ([]Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %v", err)
	}
	defer f.Close()
	return ParseTrace(f, filepath.Base(path))
}

// ParseTrace reads a trace in the original format (spec §1): one job per
// line, no header, 12 TAB-separated fields. name labels errors, which are
// single lines of the form
//
//	trace.txt:17: field 6 (total_steps): "abc" is not an integer
//
// Checked: field count; the job type's model and batch size; needs_data_dir
// is 0 or 1; total_steps is a positive integer; the scale factor is a
// positive integer (any width, not only 1, 2, 4, 8); the mode; priority
// weight positive; SLO, duration and arrival finite (duration and arrival
// not negative); arrivals non-decreasing. Trailing blank lines and CR line
// endings are accepted; a blank line before the last job is an error,
// since job ids are line indices.
func ParseTrace(r io.Reader, name string) ([]Spec, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var (
		specs []Spec
		blank int // first blank line not yet followed by a job
		line  int
	)
	for sc.Scan() {
		line++
		text := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(text) == "" {
			if blank == 0 {
				blank = line
			}
			continue
		}
		if blank != 0 {
			return nil, &TraceError{File: name, Line: blank, Msg: "blank line between jobs (job ids are line indices)"}
		}
		sp, err := parseTraceLine(text, len(specs))
		if err != nil {
			err.File, err.Line = name, line
			return nil, err
		}
		if n := len(specs); n > 0 && sp.Arrival < specs[n-1].Arrival {
			return nil, &TraceError{File: name, Line: line, Field: 12,
				Msg: fmt.Sprintf("%s is before the previous job's arrival %s (arrivals must not decrease)",
					formatPlain(sp.Arrival), formatPlain(specs[n-1].Arrival))}
		}
		specs = append(specs, sp)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &TraceError{File: name, Line: line + 1, Msg: "line longer than 1 MiB"}
		}
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", name)
	}
	return specs, nil
}

// parseTraceLine parses one non-blank line; the returned error lacks the
// file name and line number.
func parseTraceLine(text string, id int) (Spec, *TraceError) {
	f := strings.Split(text, "\t")
	if len(f) != len(traceFields) {
		return Spec{}, &TraceError{Msg: fmt.Sprintf("has %d TAB-separated fields, want %d", len(f), len(traceFields))}
	}
	bad := func(field int, format string, args ...any) *TraceError {
		return &TraceError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	sp := Spec{ID: id, JobType: f[0], Command: f[1], WorkingDir: f[2], NumStepsArg: f[3]}
	var err error
	if sp.Model, sp.BatchSize, err = ParseJobType(f[0]); err != nil {
		return Spec{}, bad(1, "%v", err)
	}
	switch f[4] {
	case "0":
	case "1":
		sp.NeedsDataDir = true
	default:
		return Spec{}, bad(5, "%q is not 0 or 1", f[4])
	}
	if sp.TotalSteps, err = strconv.ParseInt(f[5], 10, 64); err != nil {
		return Spec{}, bad(6, "%q is not an integer", f[5])
	}
	if sp.TotalSteps < 1 {
		return Spec{}, bad(6, "%d is not positive", sp.TotalSteps)
	}
	sf, err := strconv.Atoi(f[6])
	if err != nil {
		return Spec{}, bad(7, "%q is not an integer", f[6])
	}
	if sf < 1 {
		return Spec{}, bad(7, "%d GPUs: the scale factor must be at least 1", sf)
	}
	sp.ScaleFactor = sf
	if sp.Mode, err = ParseMode(f[7]); err != nil {
		return Spec{}, bad(8, "%v", err)
	}
	nums := []struct {
		field int
		dst   *float64
		check func(float64) string
	}{
		{9, &sp.PriorityWeight, func(v float64) string { return ifTrue(!(v > 0), "must be positive") }},
		{10, &sp.SLO, func(float64) string { return "" }},
		{11, &sp.Duration, func(v float64) string { return ifTrue(v < 0, "must not be negative") }},
		{12, &sp.Arrival, func(v float64) string { return ifTrue(v < 0, "must not be negative") }},
	}
	for _, n := range nums {
		s := f[n.field-1]
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return Spec{}, bad(n.field, "%q is not a number", s)
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Spec{}, bad(n.field, "%q is not finite", s)
		}
		if msg := n.check(v); msg != "" {
			return Spec{}, bad(n.field, "%s %s", s, msg)
		}
		*n.dst = v
	}
	return sp, nil
}

func ifTrue(c bool, msg string) string {
	if c {
		return msg
	}
	return ""
}

// WriteTrace writes specs in the trace format ParseTrace reads (spec §1),
// one line per spec in slice order, each ending in a newline. Numbers are
// written as the original's files write them: integral durations and
// arrivals without a fraction, the SLO as %f ("-1.000000"); any value is
// written so that it parses back to the same float64. Spec.ID is not
// written (it is the line index). Text fields must not contain TAB or
// newline characters.
func WriteTrace(w io.Writer, specs []Spec) error {
	bw := bufio.NewWriter(w)
	for i, sp := range specs {
		for k, s := range []string{sp.JobType, sp.Command, sp.WorkingDir, sp.NumStepsArg} {
			if strings.ContainsAny(s, "\t\r\n") {
				return fmt.Errorf("workload: job %d: field %d (%s) contains a TAB or newline", i, k+1, traceFields[k])
			}
		}
		if sp.Mode == "" {
			return fmt.Errorf("workload: job %d: field 8 (mode) is empty", i)
		}
		needs := "0"
		if sp.NeedsDataDir {
			needs = "1"
		}
		fields := []string{
			sp.JobType, sp.Command, sp.WorkingDir, sp.NumStepsArg, needs,
			strconv.FormatInt(sp.TotalSteps, 10), strconv.Itoa(sp.ScaleFactor), string(sp.Mode),
			strconv.FormatFloat(sp.PriorityWeight, 'g', -1, 64), formatSLO(sp.SLO),
			formatPlain(sp.Duration), formatPlain(sp.Arrival),
		}
		bw.WriteString(strings.Join(fields, "\t"))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// formatPlain writes v without exponent and without a fraction when
// integral ("1418", "0.5").
func formatPlain(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// formatSLO writes v as C's %f ("-1.000000") when that is exact, else with
// the shortest exact representation.
func formatSLO(v float64) string {
	s := strconv.FormatFloat(v, 'f', 6, 64)
	if back, err := strconv.ParseFloat(s, 64); err == nil && back == v {
		return s
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
