package coordinator

import (
	"fmt"
	"math"
)

// Defaults of Config (spec §3.1, §3.3 step 2.4, §3.6).
const (
	DefaultRoundSeconds       = 120
	DefaultMaxFailedLeases    = 5
	DefaultRuntimeLimitFactor = 1.5
)

// Config sets up a Core. The zero value of every optional field means its
// documented default.
type Config struct {
	// GPUs is the number of GPUs the coordinator schedules (required, > 0).
	GPUs int
	// RoundSeconds is the round length Δ (default 120).
	RoundSeconds float64
	// MaxFailedLeases ends a job after this many consecutive RUN leases in
	// which it made no progress at all (default 5; negative disables).
	MaxFailedLeases int
	// RuntimeLimitFactor ends a job whose accumulated run time exceeds
	// trunc(trunc(isolated_seconds) × factor), for jobs that declared their
	// isolated run time (default 1.5; negative disables).
	RuntimeLimitFactor float64
	// LeaseGraceSeconds is added to a lease's end to form its expiry, so a
	// job is not cut off by a coordinator that is a little late (default 0).
	LeaseGraceSeconds float64
	// JobTimeoutSeconds marks an active job lost when it sent nothing (no
	// registration, no event, not even a heartbeat) for this long; its
	// GPUs go to others until it comes back (lifecycle.go). 0 disables it:
	// the simulator's setting, as simulated jobs send no heartbeats while
	// they wait. The service defaults to 3 rounds.
	JobTimeoutSeconds float64
	// ExpireLeases makes a tick that comes after the previous round's
	// leases expired treat them as void: no extension, no SUSPEND, no
	// failure counted, since the jobs stopped by themselves at the expiry
	// (the service sets it; the simulator, whose rounds end when their work
	// is done, does not).
	ExpireLeases bool
}

// Validate checks the configuration and fills in defaults.
func (c *Config) Validate() error {
	if c.GPUs <= 0 {
		return fmt.Errorf("coordinator: config: GPUs must be positive, got %d", c.GPUs)
	}
	if c.RoundSeconds == 0 {
		c.RoundSeconds = DefaultRoundSeconds
	}
	if math.IsNaN(c.RoundSeconds) || c.RoundSeconds < 0.001 || c.RoundSeconds > 86400 {
		return fmt.Errorf("coordinator: config: round length %gs out of range [0.001, 86400]", c.RoundSeconds)
	}
	if c.MaxFailedLeases == 0 {
		c.MaxFailedLeases = DefaultMaxFailedLeases
	}
	if c.RuntimeLimitFactor == 0 {
		c.RuntimeLimitFactor = DefaultRuntimeLimitFactor
	}
	if math.IsNaN(c.RuntimeLimitFactor) || math.IsNaN(c.LeaseGraceSeconds) || c.LeaseGraceSeconds < 0 {
		return fmt.Errorf("coordinator: config: invalid runtime limit factor or lease grace")
	}
	if math.IsNaN(c.JobTimeoutSeconds) || c.JobTimeoutSeconds < 0 {
		return fmt.Errorf("coordinator: config: job timeout %gs is negative", c.JobTimeoutSeconds)
	}
	return nil
}
