package protocol

import (
	"errors"
	"fmt"
	"math"
)

// Version is the schema version carried in every message's "v" field.
const Version = 1

// Limits that keep absurd values out of the coordinator. They are generous:
// a job that needs more is almost certainly reporting garbage.
const (
	MaxWorkers      = 4096
	MaxBatchSize    = 1 << 24
	MaxEpochs       = 1 << 20
	MaxSteps        = int64(1) << 50
	MaxThroughput   = 1e9 // steps per second
	MaxSeconds      = 1e10
	MaxJobIDLen     = 128
	MaxModelNameLen = 128
	// MaxSeq bounds an event's sequence number: 2^53, the largest integer
	// every JSON implementation reads exactly (a job at one event a
	// millisecond needs 285,000 years to reach it).
	MaxSeq = uint64(1) << 53
	// MaxSeqGap bounds the jump of a job's sequence numbers between two
	// accepted events (events lost in an outage leave gaps), so that one
	// absurd number cannot make every later event of the job out of order.
	MaxSeqGap = uint64(1) << 32
)

// A job's event budget: the coordinator folds at most EventBurst of a job's
// events at once and EventRate a second on average, and rejects the rest as
// rate_limited (counted per event, duplicates included). The SDK paces its
// publication under it, so that no event it sends is refused for the rate.
const (
	EventRate  = 200
	EventBurst = 2000
)

// MaxJobEpochs bounds the epochs a registration may imply
// (ceil(total_steps / ceil(dataset_size / batch_size))) and the length of a
// declared schedule. Forecasts keep per-epoch state, so an absurd count would
// cost the coordinator memory and time; the longest job of the original
// traces has under 800 epochs.
const (
	MaxJobEpochs   = 100_000
	MaxScheduleLen = MaxJobEpochs
)

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("protocol: invalid message")

// FieldError names the message and field that failed validation.
type FieldError struct {
	Msg    string // message kind, e.g. "register"
	Field  string // JSON field name
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("protocol: invalid %s: field %q: %s", e.Msg, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func fieldErr(msg, field, format string, args ...any) error {
	return &FieldError{Msg: msg, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// isToken reports whether s is non-empty and only letters, digits, '-' and
// '_' (what ^[A-Za-z0-9_-]+$ matches; a loop, as every event's job id is
// checked on the coordinator's hot path).
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return s != ""
}

// ValidateJobID checks that id is usable as one NATS subject token.
func ValidateJobID(msg, id string) error {
	switch {
	case id == "":
		return fieldErr(msg, "job", "empty job id")
	case len(id) > MaxJobIDLen:
		return fieldErr(msg, "job", "job id longer than %d bytes", MaxJobIDLen)
	case !isToken(id):
		return fieldErr(msg, "job", "job id %q may contain only letters, digits, '-' and '_'", id)
	}
	return nil
}

func checkFinite(msg, field string, v, lo, hi float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fieldErr(msg, field, "not a finite number")
	}
	if v < lo || v > hi {
		return fieldErr(msg, field, "%g out of range [%g, %g]", v, lo, hi)
	}
	return nil
}

func checkVersion(msg string, v int) error {
	if v != Version {
		return fieldErr(msg, "v", "unsupported schema version %d (this build speaks %d)", v, Version)
	}
	return nil
}

// MaxNodeNameLen bounds a node name (topology.ValidName uses the same rule).
const MaxNodeNameLen = 64

// ValidateNodeName checks a node name: 1 to 64 letters, digits, '-' or '_'
// (one subject token).
func ValidateNodeName(msg, field, name string) error {
	switch {
	case name == "":
		return fieldErr(msg, field, "empty node name")
	case len(name) > MaxNodeNameLen:
		return fieldErr(msg, field, "node name longer than %d bytes", MaxNodeNameLen)
	case !isToken(name):
		return fieldErr(msg, field, "node name %q may contain only letters, digits, '-' and '_'", name)
	}
	return nil
}
