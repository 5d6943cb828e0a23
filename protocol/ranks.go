package protocol

import (
	"fmt"
	"math"
)

// Ranks is the subject on which the ranks of a multi-process job agree
// where to stop and resume: rank 0 publishes RankControl messages there,
// the other ranks RankStatus messages (both as RankMessage). The
// coordinator takes no part; per-job credentials allow a job this subject
// (publish and subscribe) and no other job's.
func (s Subjects) Ranks(job string) string { return s.Prefix + ".job." + job + ".ranks" }

// MaxWorldSize bounds the ranks of one job.
const MaxWorldSize = MaxWorkers

// RankStop says why the ranks of a job stop at RankMessage.StopAt.
type RankStop string

// Reasons to stop.
const (
	StopSuspend RankStop = "suspend" // a SUSPEND lease or an expired RUN lease: wait for RUN
	StopPreempt RankStop = "preempt" // the same in EXIT mode: exit, to be restarted
	StopEnd     RankStop = "end"     // the coordinator ended the job (EXIT lease)
	StopAbort   RankStop = "abort"   // a rank was lost: exit non-zero, restart from the checkpoint
)

// RankMessage is one message on a job's ranks subject.
//
// Rank 0 (the leader) sends the agreement: generation Gen of its process
// session Session runs from step Base; the ranks may begin any step below
// Release; when StopAt >= 0 every rank stops at the boundary StopAt (steps
// done) for reason Stop. Generation 0 means "not started yet". Lease is the
// lease the ranks act on (the RUN lease of a running generation, with its
// devices). Resume is the progress at Base, for a rank that joins.
// Finished says rank 0 completed the job's work.
//
// The other ranks send their state: the session and generation they
// follow (0 before they joined), Step (steps done), and Running.
// Proc identifies the sending process (random per process), so that two
// processes claiming one rank are caught.
type RankMessage struct {
	V       int    `json:"v"`
	Job     string `json:"job"`
	Rank    int    `json:"rank"`
	World   int    `json:"world"`
	Proc    uint64 `json:"proc"`
	Session uint64 `json:"session"`
	Gen     uint64 `json:"gen"`
	Step    int64  `json:"step"`
	Running bool   `json:"running,omitempty"`

	// Rank 0 only.
	Base     int64           `json:"base,omitempty"`
	Release  int64           `json:"release,omitempty"`
	StopAt   int64           `json:"stop_at"`
	Stop     RankStop        `json:"stop,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Lease    *Lease          `json:"lease,omitempty"`
	Resume   *RankCheckpoint `json:"resume,omitempty"`
	Finished bool            `json:"finished,omitempty"`
}

// RankCheckpoint is the progress a joining rank adopts: the fields of the
// SDK's checkpoint.
type RankCheckpoint struct {
	StepsDone      int64 `json:"steps_done"`
	Epoch          int   `json:"epoch"`
	BatchSize      int   `json:"batch_size"`
	SamplesInEpoch int64 `json:"samples_in_epoch"`
	SamplesDone    int64 `json:"samples_done"`
}

// MaxRankReasonLen bounds RankMessage.Reason.
const MaxRankReasonLen = 1024

// Validate checks a rank message.
func (r *RankMessage) Validate() error {
	const m = "ranks"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	if err := ValidateJobID(m, r.Job); err != nil {
		return err
	}
	switch {
	case r.World < 2 || r.World > MaxWorldSize:
		return fieldErr(m, "world", "world size %d out of range [2, %d]", r.World, MaxWorldSize)
	case r.Rank < 0 || r.Rank >= r.World:
		return fieldErr(m, "rank", "rank %d out of range [0, %d)", r.Rank, r.World)
	case r.Proc == 0:
		return fieldErr(m, "proc", "zero process id")
	case r.Step < 0 || r.Step > MaxSteps:
		return fieldErr(m, "step", "%d out of range [0, %d]", r.Step, MaxSteps)
	case len(r.Reason) > MaxRankReasonLen:
		return fieldErr(m, "reason", "longer than %d bytes", MaxRankReasonLen)
	}
	if r.Rank != 0 {
		if r.Base != 0 || r.Release != 0 || r.StopAt != -1 || r.Stop != "" || r.Lease != nil || r.Resume != nil || r.Finished {
			return fieldErr(m, "rank", "rank %d sent fields only rank 0 may send", r.Rank)
		}
		return nil
	}
	if r.Session == 0 {
		return fieldErr(m, "session", "rank 0 sent session 0")
	}
	switch {
	case r.Base < 0 || r.Base > MaxSteps:
		return fieldErr(m, "base", "%d out of range [0, %d]", r.Base, MaxSteps)
	case r.Release < r.Base || r.Release > math.MaxInt64/2:
		return fieldErr(m, "release", "%d below base %d or too large", r.Release, r.Base)
	case r.StopAt < -1 || r.StopAt > r.Release:
		return fieldErr(m, "stop_at", "%d not -1 and not in [0, release %d]", r.StopAt, r.Release)
	case r.StopAt >= 0 && r.StopAt < r.Base:
		return fieldErr(m, "stop_at", "%d below base %d", r.StopAt, r.Base)
	}
	switch r.Stop {
	case "":
		if r.StopAt >= 0 {
			return fieldErr(m, "stop", "stop_at %d without a reason to stop", r.StopAt)
		}
	case StopSuspend, StopPreempt, StopEnd, StopAbort:
		if r.StopAt < 0 {
			return fieldErr(m, "stop_at", "stop %q without a step", r.Stop)
		}
	default:
		return fieldErr(m, "stop", "unknown stop %q", r.Stop)
	}
	if r.Lease != nil {
		if err := r.Lease.Validate(); err != nil {
			return fmt.Errorf("protocol: ranks: lease: %w", err)
		}
		if r.Lease.Job != r.Job {
			return fieldErr(m, "lease", "lease of job %q on job %q's ranks", r.Lease.Job, r.Job)
		}
	}
	if c := r.Resume; c != nil {
		if c.StepsDone != r.Base || c.Epoch < 0 || c.BatchSize < 1 || c.BatchSize > MaxBatchSize || c.SamplesInEpoch < 0 || c.SamplesDone < 0 {
			return fieldErr(m, "resume", "bad progress %+v at base %d", *c, r.Base)
		}
	}
	return nil
}

// DecodeRankMessage decodes and validates a message of a ranks subject.
func DecodeRankMessage(data []byte, limit int) (*RankMessage, error) {
	var r RankMessage
	if err := decodeStrict("ranks", data, limit, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
