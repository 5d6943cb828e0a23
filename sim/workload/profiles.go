package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

// JobProfile is what one job really did, epoch by epoch: the batch size it
// trained epoch e at and the throughput (steps/s on its ScaleFactor GPUs)
// it ran at — the information the original keeps in its per-job profile
// pickles. A Spec with a Profile runs it instead of the throughput table
// and the adaptation rules (spec §2.5): at each round boundary the job
// adopts the batch size its profile gives the next epoch it starts (no
// lag, unlike the rules), and each micro-task runs at the throughput of
// the epoch it starts in.
type JobProfile struct {
	BatchSizes  []int
	Throughputs []float64
}

// ProfileVersion is the "v" of every line of a profile file.
const ProfileVersion = 1

// Limits of a profile file.
const (
	maxProfileLine   = 16 << 20 // bytes
	maxProfileEpochs = 100000
	maxProfileThr    = 1e9 // steps/s
)

// profileLine is one line of a JSON Lines profile file (docs/forecasting.md):
//
//	{"v":1,"job_type":"ResNet-18 (batch size 32)","scale_factor":1,"mode":"gns",
//	 "priority":1,"arrival_s":0,"total_steps":23450,
//	 "batch_sizes":[32,32,…,64],"throughputs":[11.9,11.9,…,8.7]}
//
// job_type names a known model and the initial batch size; total_steps
// counts steps at it; batch_sizes and throughputs have one entry per epoch
// E = ceil(total_steps / ceil(D / bs0)), batch_sizes[0] = bs0.
type profileLine struct {
	V           int       `json:"v"`
	JobType     string    `json:"job_type"`
	ScaleFactor int       `json:"scale_factor"`
	Mode        Mode      `json:"mode"`
	Priority    float64   `json:"priority"`
	Arrival     float64   `json:"arrival_s"`
	TotalSteps  int64     `json:"total_steps"`
	BatchSizes  []int     `json:"batch_sizes"`
	Throughputs []float64 `json:"throughputs"`
}

// ReadProfilesFile reads a JSON Lines profile file (ReadProfiles).
func ReadProfilesFile(path string) ([]Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %v", err)
	}
	defer f.Close()
	return ReadProfiles(f, filepath.Base(path))
}

// ReadProfiles reads one job per line in the JSON Lines profile format.
// Every field is checked (unknown fields, versions, types, ranges, epoch
// counts, non-decreasing arrivals); an error names the line and the field.
// Blank lines are allowed only at the end, since job ids are line indices.
func ReadProfiles(r io.Reader, name string) ([]Spec, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxProfileLine)
	var specs []Spec
	line, blank := 0, 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			if blank == 0 {
				blank = line
			}
			continue
		}
		if blank != 0 {
			return nil, fmt.Errorf("%s:%d: blank line between jobs (job ids are line indices)", name, blank)
		}
		sp, err := parseProfileLine(text, len(specs))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		if n := len(specs); n > 0 && sp.Arrival < specs[n-1].Arrival {
			return nil, fmt.Errorf("%s:%d: arrival_s %g is before the previous job's %g", name, line, sp.Arrival, specs[n-1].Arrival)
		}
		specs = append(specs, sp)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, line+1, maxProfileLine)
		}
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("%s: no jobs", name)
	}
	return specs, nil
}

func parseProfileLine(text []byte, id int) (Spec, error) {
	var pl profileLine
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pl); err != nil {
		return Spec{}, fmt.Errorf("not a profile object: %v", err)
	}
	if dec.More() {
		return Spec{}, errors.New("trailing data after the object")
	}
	if pl.V != ProfileVersion {
		return Spec{}, fmt.Errorf("field v: version %d, this build reads %d", pl.V, ProfileVersion)
	}
	sp := Spec{ID: id, JobType: pl.JobType, ScaleFactor: pl.ScaleFactor, Mode: pl.Mode, PriorityWeight: pl.Priority,
		SLO: -1, Arrival: pl.Arrival, TotalSteps: pl.TotalSteps,
		Profile: &JobProfile{BatchSizes: pl.BatchSizes, Throughputs: pl.Throughputs}}
	var err error
	if sp.Model, sp.BatchSize, err = ParseJobType(pl.JobType); err != nil {
		return Spec{}, fmt.Errorf("field job_type: %v", err)
	}
	if _, err := ParseMode(string(pl.Mode)); err != nil {
		return Spec{}, fmt.Errorf("field mode: %v", err)
	}
	switch {
	case pl.ScaleFactor < 1:
		return Spec{}, fmt.Errorf("field scale_factor: %d, want ≥ 1", pl.ScaleFactor)
	case !(pl.Priority > 0) || math.IsInf(pl.Priority, 0):
		return Spec{}, fmt.Errorf("field priority: %g, want a positive number", pl.Priority)
	case !(pl.Arrival >= 0) || math.IsInf(pl.Arrival, 0):
		return Spec{}, fmt.Errorf("field arrival_s: %g, want a finite number ≥ 0", pl.Arrival)
	case pl.TotalSteps < 1:
		return Spec{}, fmt.Errorf("field total_steps: %d, want ≥ 1", pl.TotalSteps)
	}
	if err := sp.Profile.check(sp); err != nil {
		return Spec{}, err
	}
	return sp, nil
}

// check validates a profile against its job.
func (p *JobProfile) check(sp Spec) error {
	E := Epochs(sp.Model, sp.BatchSize, sp.TotalSteps)
	switch {
	case E > maxProfileEpochs:
		return fmt.Errorf("field total_steps: %d epochs, more than %d", E, maxProfileEpochs)
	case len(p.BatchSizes) != E:
		return fmt.Errorf("field batch_sizes: %d entries, want one per epoch (%d)", len(p.BatchSizes), E)
	case len(p.Throughputs) != E:
		return fmt.Errorf("field throughputs: %d entries, want one per epoch (%d)", len(p.Throughputs), E)
	case p.BatchSizes[0] != sp.BatchSize:
		return fmt.Errorf("field batch_sizes: epoch 0 at %d, want the job type's %d", p.BatchSizes[0], sp.BatchSize)
	}
	for e, bs := range p.BatchSizes {
		if bs < 1 || bs > 1<<24 {
			return fmt.Errorf("field batch_sizes: epoch %d: %d out of range [1, 2^24]", e, bs)
		}
	}
	for e, v := range p.Throughputs {
		if !(v > 0 && v <= maxProfileThr) {
			return fmt.Errorf("field throughputs: epoch %d: %g, want in (0, %g] steps/s", e, v, maxProfileThr)
		}
	}
	return nil
}

// WriteProfiles writes one line per spec (each must carry a Profile) in
// the format ReadProfiles reads; the values read back are identical.
func WriteProfiles(w io.Writer, specs []Spec) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i, sp := range specs {
		if sp.Profile == nil {
			return fmt.Errorf("workload: job %d has no profile", i)
		}
		pl := profileLine{V: ProfileVersion, JobType: sp.JobType, ScaleFactor: sp.ScaleFactor, Mode: sp.Mode,
			Priority: sp.PriorityWeight, Arrival: sp.Arrival, TotalSteps: sp.TotalSteps,
			BatchSizes: sp.Profile.BatchSizes, Throughputs: sp.Profile.Throughputs}
		if err := enc.Encode(pl); err != nil {
			return fmt.Errorf("workload: job %d: %v", i, err)
		}
	}
	return bw.Flush()
}

// at returns the profile's batch size and throughput of epoch e (clamped
// to the profile).
func (p *JobProfile) at(e int) (int, float64) {
	e = min(max(e, 0), len(p.BatchSizes)-1)
	return p.BatchSizes[e], p.Throughputs[e]
}

// epochIndex is the epoch the job is in: floor(done / ceil(D / bs)).
func (s *State) epochIndex() int {
	ipe := int64(IterationsPerEpoch(s.model, s.BatchSize))
	if ipe == 0 {
		return 0
	}
	return int(max(s.Done, 0) / ipe)
}

// flagsProfile is SetFlags for a job with a profile: the job runs at the
// throughput of the epoch it is in, and flags a change when the next epoch
// to start (RuntimeEpoch: a rescale rounds completed epochs up) has
// another batch size in its profile.
func (s *State) flagsProfile() {
	_, v := s.profile.at(s.warp.at(s.epochIndex()))
	s.Throughput = v * s.speedOr1()
	bs, _ := s.profile.at(s.warp.at(s.RuntimeEpoch()))
	if bs == s.BatchSize {
		return
	}
	s.target = bs
	s.Grow, s.Shrink = bs > s.BatchSize, bs < s.BatchSize
}

// rescaleProfile is Rescale for a job with a profile: it adopts the
// pending batch size with the step arithmetic of the rules and the
// throughput of the epoch it then is in.
func (s *State) rescaleProfile(m ModelInfo) bool {
	if s.target == 0 || s.target == s.BatchSize {
		s.clearFlags()
		return false
	}
	oldIPE := int64(IterationsPerEpoch(m.Name, s.BatchSize))
	newIPE := int64(IterationsPerEpoch(m.Name, s.target))
	if oldIPE == 0 || newIPE == 0 {
		s.clearFlags()
		return false
	}
	s.rescaleSteps(oldIPE, newIPE, s.BatchSize, s.target)
	s.target = 0
	_, v := s.profile.at(s.warp.at(s.epochIndex()))
	s.Throughput = v * s.speedOr1()
	return true
}

func (s *State) speedOr1() float64 {
	if s.speed > 0 {
		return s.speed
	}
	return 1
}
