package workload

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/shockwave-sched/shockwave/sim/workload/internal/thrtable"
)

//go:generate go run ./internal/gen -out throughputs_table.go

// Throughputs is a table of isolated throughputs: for a job type on sf GPUs,
// the training iterations per second of the whole gang (spec §2.2). It is
// immutable and safe for concurrent use.
type Throughputs struct {
	name string
	v    map[thrKey]float64
}

type thrKey struct {
	jobType string
	sf      int
}

// isolated is one row of a built-in table (throughputs_table.go).
type isolated struct {
	jobType        string
	sf             int
	stepsPerSecond float64
}

// Name identifies the table: "tacc" or "wisr" for the built-in ones, the
// file's base name for a loaded file.
func (t *Throughputs) Name() string { return t.name }

// Lookup returns thr(jobType, sf), the isolated throughput in steps/s, and
// whether the table has an entry. An entry can be present with value 0
// (Transformer batch size 256 in both original files): the run-time rescale
// treats it as present (spec §2.5 step 3) while the profile cannot divide by
// it (NewProfile returns an error).
func (t *Throughputs) Lookup(jobType string, sf int) (float64, bool) {
	if t == nil {
		return 0, false
	}
	v, ok := t.v[thrKey{jobType, sf}]
	return v, ok
}

// Len is the number of (job type, scale factor) entries.
func (t *Throughputs) Len() int { return len(t.v) }

// Entry is one isolated throughput of a table.
type Entry struct {
	JobType        string
	ScaleFactor    int
	StepsPerSecond float64
}

// Entries returns every entry, ordered by model, batch size and scale factor.
func (t *Throughputs) Entries() []Entry {
	out := make([]thrtable.Entry, 0, len(t.v))
	for k, v := range t.v {
		out = append(out, thrtable.Entry{JobType: k.jobType, ScaleFactor: k.sf, StepsPerSecond: v})
	}
	slices.SortFunc(out, thrtable.Compare)
	res := make([]Entry, len(out))
	for i, e := range out {
		res[i] = Entry(e)
	}
	return res
}

// BuiltinNames lists the tables Builtin knows.
func BuiltinNames() []string { return []string{"tacc", "wisr"} }

// Builtin returns a table carried by the project: "tacc" (the 120-job,
// 32-GPU experiment) or "wisr" (the 220/460/900-job experiments), spec §1 and
// §2.2. They hold the isolated V100 figures of the original files with full
// precision (throughputs_table.go).
func Builtin(name string) (*Throughputs, error) {
	rows, ok := builtinThroughputs[name]
	if !ok {
		return nil, fmt.Errorf("workload: no built-in throughput table %q (known: tacc, wisr)", name)
	}
	t := &Throughputs{name: name, v: make(map[thrKey]float64, len(rows))}
	for _, r := range rows {
		t.v[thrKey{r.jobType, r.sf}] = r.stepsPerSecond
	}
	return t, nil
}

// LoadThroughputs reads a throughput file in the original JSON format
// (spec §2.2): worker types at the top level, of which only "v100" is read;
// under it, keys are Python tuple strings "('<job_type>', <sf>)" and the
// "null" entry of each is the isolated throughput. Co-location pairs are
// ignored. The table is named after the file's base name.
func LoadThroughputs(path string) (*Throughputs, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %v", err)
	}
	defer f.Close()
	return ReadThroughputs(f, filepath.Base(path))
}

// ReadThroughputs is LoadThroughputs on a reader; name names the table and
// prefixes errors.
func ReadThroughputs(r io.Reader, name string) (*Throughputs, error) {
	entries, err := thrtable.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("workload: %s: %v", name, err)
	}
	t := &Throughputs{name: name, v: make(map[thrKey]float64, len(entries))}
	for _, e := range entries {
		t.v[thrKey{e.JobType, e.ScaleFactor}] = e.StepsPerSecond
	}
	return t, nil
}

// positive returns thr(jobType, sf) when it is present and positive, or an
// error naming what is missing.
func (t *Throughputs) positive(jobType string, sf int) (float64, error) {
	v, ok := t.Lookup(jobType, sf)
	if !ok {
		return 0, fmt.Errorf("no throughput for %q on %d GPUs in the %s table", jobType, sf, t.nameOrNil())
	}
	if !(v > 0) {
		return 0, fmt.Errorf("throughput of %q on %d GPUs is %v in the %s table", jobType, sf, v, t.nameOrNil())
	}
	return v, nil
}

func (t *Throughputs) nameOrNil() string {
	if t == nil {
		return "(nil)"
	}
	return t.name
}
