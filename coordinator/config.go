package coordinator

import (
	"fmt"
	"math"

	"github.com/shockwave-sched/shockwave/topology"
)

// Defaults of Config (spec §3.1, §3.3 step 2.4, §3.6).
const (
	DefaultRoundSeconds       = 120
	DefaultMaxFailedLeases    = 5
	DefaultRuntimeLimitFactor = 1.5
	// MaxLeaseRounds bounds Config.LeaseRounds: a lease longer than this
	// many rounds would let a job that missed its SUSPEND run on too long.
	MaxLeaseRounds = 16
)

// Config sets up a Core. The zero value of every optional field means its
// documented default.
type Config struct {
	// GPUs is the number of GPUs the coordinator schedules: with no
	// Cluster, a flat pool of one node ("node-0") of GPUs devices (> 0).
	// With a Cluster it may be 0 (set to the cluster's total) or must equal
	// that total.
	GPUs int
	// Cluster is the set of nodes jobs are placed on (package topology).
	// Empty means topology.Flat(GPUs), whose placement is exactly that of
	// the flat pool.
	Cluster topology.Cluster
	// Dynamic makes membership change with JoinNode and LeaveNode (node
	// agents): the cluster may start empty, and a gang wider than the
	// current cluster waits instead of being refused at registration.
	Dynamic bool
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
	// LeaseRounds is how many rounds a RUN lease covers (default 1; at
	// most MaxLeaseRounds). With more than one, a RUN lease is valid for
	// LeaseRounds rounds plus the grace, and a job that keeps its grant is
	// sent a renewal only once less than two rounds of its lease remain:
	// every LeaseRounds−1 rounds instead of every round, and a renewal may
	// come a whole round late without stopping the job. A preempted job is
	// told so by a SUSPEND lease as before, sent again when it reports
	// progress while it holds no grant (lifecycle.go, leases.go).
	LeaseRounds int
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
	// KeepEnded is the most ended (completed, failed, expired, cancelled)
	// and lost jobs the job table keeps: past it, the job that ended or
	// was lost first is forgotten, with its event budget and submission
	// (retention.go). 0 keeps them all (the simulator's setting, and logs
	// written before it existed); the service defaults to
	// DefaultKeepEnded in a new log.
	KeepEnded int
}

// Validate checks the configuration and fills in defaults.
func (c *Config) Validate() error {
	if err := c.validateCluster(); err != nil {
		return err
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
	if c.KeepEnded < 0 {
		return fmt.Errorf("coordinator: config: %d ended jobs to keep is negative (0 keeps them all)", c.KeepEnded)
	}
	if c.LeaseRounds == 0 {
		c.LeaseRounds = 1
	}
	if c.LeaseRounds < 1 || c.LeaseRounds > MaxLeaseRounds {
		return fmt.Errorf("coordinator: config: lease rounds %d out of range [1, %d]", c.LeaseRounds, MaxLeaseRounds)
	}
	if math.IsNaN(c.JobTimeoutSeconds) || c.JobTimeoutSeconds < 0 {
		return fmt.Errorf("coordinator: config: job timeout %gs is negative", c.JobTimeoutSeconds)
	}
	return nil
}

// validateCluster reconciles GPUs and Cluster (see their comments).
func (c *Config) validateCluster() error {
	if len(c.Cluster.Nodes) == 0 {
		switch {
		case c.GPUs > 0:
			c.Cluster = topology.Flat(c.GPUs)
		case c.Dynamic && c.GPUs == 0:
			return nil // nodes join later
		default:
			return fmt.Errorf("coordinator: config: GPUs must be positive, got %d", c.GPUs)
		}
	}
	if err := c.Cluster.Validate(); err != nil {
		return fmt.Errorf("coordinator: config: %w", err)
	}
	total := c.Cluster.GPUs()
	if c.GPUs == 0 {
		c.GPUs = total
	}
	if c.GPUs != total {
		return fmt.Errorf("coordinator: config: GPUs %d differs from the cluster's %d", c.GPUs, total)
	}
	return nil
}
