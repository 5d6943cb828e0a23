package coordinator

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// DefaultJobTimeoutRounds is the service's default job timeout, in rounds.
const DefaultJobTimeoutRounds = 3

// DefaultLeaseRounds is the service's Config.LeaseRounds in a new log: a
// RUN lease covers three rounds, so a job that keeps its GPUs is sent a
// renewal every other round, and a coordinator that fails over within a
// round stops no job (leases.go).
const DefaultLeaseRounds = 3

// ServiceConfig sets up a Service. Zero values mean the documented defaults.
type ServiceConfig struct {
	// Core configures the state machine. GPUs or Cluster is required
	// (Config.Dynamic: neither, nodes join). The service
	// always sets ExpireLeases; JobTimeoutSeconds defaults to
	// DefaultJobTimeoutRounds rounds and LeaseGraceSeconds to a quarter
	// round, so that a lease outlives the small delay of its renewal.
	// LeaseRounds 0 means DefaultLeaseRounds in a new log and the log's
	// own in a log the service continues; another value must match the
	// log's.
	Core Config
	// leaseRoundsUnset records that Core.LeaseRounds was 0 (validate).
	leaseRoundsUnset bool
	// KeepEnded is Core.KeepEnded for the service: 0 means
	// DefaultKeepEnded in a new log and the log's own in a log the service
	// continues, a negative value keeps every ended job, and another value
	// must match the log's. (Core.KeepEnded itself is ignored.)
	KeepEnded int
	// keepEndedUnset records that KeepEnded was 0 (validate).
	keepEndedUnset bool
	// logPull is how many log records the consumer asks the server for at
	// a time (0: the client's default, 500); the load test tries others.
	logPull int
	// Policy names the allocation policy (required); PolicyOptions is
	// passed to its constructor.
	Policy        string
	PolicyOptions policy.Options
	// Prefix of every subject (default protocol.DefaultPrefix).
	Prefix string
	// MaxMessageBytes is the size limit of a message (default
	// protocol.DefaultMaxMessageBytes).
	MaxMessageBytes int
	// Storage and Replicas of the log stream and the snapshot bucket
	// (default file storage, 1 replica).
	Storage  jetstream.StorageType
	Replicas int
	// LeaderTTL is how long a standby waits for a silent leader before it
	// takes over (default: two rounds, between 1 s and 5 s).
	LeaderTTL time.Duration
	// OwnServer says the connection goes to an embedded, unclustered NATS
	// server this process started (and whose data directory it locked): a
	// leader lease taken through an earlier incarnation of that server is
	// stale, so a restart after a crash takes over at once.
	OwnServer bool
	// MaxJobs caps the jobs that are pending or active at once (default
	// DefaultMaxJobs); MaxJobsPerClient caps the new jobs one client
	// (connection, or user in creds mode) may register (default
	// DefaultMaxJobsPerClient). Refusals are counted.
	MaxJobs          int
	MaxJobsPerClient int
	// SnapshotRounds is how often the state is snapshotted and the log
	// compacted, in rounds (default DefaultSnapshotRounds; recovery.go).
	// A large state is snapshotted less often: after a snapshot that
	// held the loop for d, the next waits until SnapshotShare of the time
	// since is d (recovery.go).
	SnapshotRounds int
	// SnapshotShare bounds the share of the loop's time spent encoding
	// snapshots (default DefaultSnapshotShare); events wait meanwhile.
	SnapshotShare float64
	// LeaseConns is how many connections the publisher sends leases and
	// registration replies on (default DefaultLeaseConns; publish.go).
	LeaseConns int
	// Recover starts from the newest good snapshot when the log or the
	// snapshots are damaged, discarding what was lost and saying so,
	// instead of refusing to serve (the --recover-from-snapshot flag).
	Recover bool
	// LogMaxBytes, when positive, bounds the log stream: past it new
	// records are refused (never old ones dropped); 0 means no limit.
	LogMaxBytes int64
	// Logger receives structured logs (nil: none).
	Logger *zerolog.Logger
	// Metrics receives the metrics (nil: a private registry).
	Metrics *Metrics
	// JobSeries is how many jobs get per-job metric series (ρ and the
	// forecast): those with the highest projected ρ. 0 means
	// DefaultJobSeries, a negative number none; the quantiles of ρ
	// (shockwave_jobs_rho) cover every job either way.
	JobSeries int

	// AgentTimeout is how long a node agent may send no heartbeat before
	// its node leaves the cluster (default DefaultAgentTimeout).
	AgentTimeout time.Duration
	// Authority issues the job credentials agents fetch (creds mode; nil:
	// agents get none).
	Authority *Authority
	// ReallocateFromLog says PolicyOptions.ReallocateOnChange is a default,
	// not the operator's choice: a log written with the other rule goes on
	// with it, as a log goes on with its own lease rounds, instead of
	// refusing to start (the CLI sets it when --reallocate-on-change is not
	// given, so that logs written before gandiva_fair honoured the option
	// still start).
	ReallocateFromLog bool
	// AgentsCarryResidents lets a node's agent carry the registrations and
	// event batches of jobs resident on its node (their processes reach it
	// through its job socket; docs/agent.md, "The job socket"), besides
	// those of the submitted jobs it runs. Meant for none and token mode,
	// where agents and jobs hold the same token anyway; in creds mode each
	// job's credentials cover only its own job, which an agent must not
	// bypass, so it stays off there.
	AgentsCarryResidents bool
	// KeepGCPercent leaves the Go collector alone. By default the service
	// raises its percent (GOGC) from shortly before each round's tick until
	// the round's last lease is flushed, so that no collection runs during
	// the round (gchold.go; docs/scale.md, session 17).
	KeepGCPercent bool
	// CarryWindow is how long the leader gathers the event batches agents
	// carry, and the registrations it takes, into one log record after the
	// first of them (carry.go, carryreg.go; default 1 ms, at most 100 ms);
	// negative appends each batch on its own, on its job's events subject,
	// and each registration as a register record.
	CarryWindow time.Duration

	// onApply, when set, sees every folded record, onRound the times of
	// each live round from its timer to its last lease flushed, and onStep
	// how long each step of the loop held it (tests, benchmarks).
	onApply func(record, *outcome)
	onRound func(*Round, roundTimes)
	onStep  func(kind string, d time.Duration)
	onStore func(step string, d time.Duration) // storing a state snapshot: put, verify, purge
	// snapStore wraps the snapshot object store (tests: a snapshot deleted
	// while a standby reads it, snapread.go).
	snapStore func(jetstream.ObjectStore) jetstream.ObjectStore
}

func (c *ServiceConfig) validate() error {
	if c.Prefix == "" {
		c.Prefix = protocol.DefaultPrefix
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = protocol.DefaultMaxMessageBytes
	}
	if c.MaxMessageBytes < 1024 || c.MaxMessageBytes > 64<<20 {
		return fmt.Errorf("coordinator: message limit %d out of range [1 KiB, 64 MiB]", c.MaxMessageBytes)
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if c.AgentTimeout == 0 {
		c.AgentTimeout = DefaultAgentTimeout
	}
	if c.SnapshotRounds == 0 {
		c.SnapshotRounds = DefaultSnapshotRounds
	}
	if c.CarryWindow == 0 {
		c.CarryWindow = defaultCarryWindow
	}
	if c.CarryWindow > MaxCarryWindow {
		return fmt.Errorf("coordinator: carry window %v is longer than %v", c.CarryWindow, MaxCarryWindow)
	}
	if c.LeaseConns == 0 {
		c.LeaseConns = DefaultLeaseConns
	}
	if c.LeaseConns < 0 || c.LeaseConns > 64 {
		return fmt.Errorf("coordinator: %d lease connections, want 1 to 64", c.LeaseConns)
	}
	if c.SnapshotShare == 0 {
		c.SnapshotShare = DefaultSnapshotShare
	}
	if !(c.SnapshotShare > 0 && c.SnapshotShare <= 1) {
		return fmt.Errorf("coordinator: snapshot share %g out of range (0, 1]", c.SnapshotShare)
	}
	if c.SnapshotRounds < 0 || c.LogMaxBytes < 0 {
		return fmt.Errorf("coordinator: snapshot interval %d rounds or log limit %d bytes is negative", c.SnapshotRounds, c.LogMaxBytes)
	}
	c.leaseRoundsUnset = c.Core.LeaseRounds == 0
	if c.leaseRoundsUnset {
		c.Core.LeaseRounds = DefaultLeaseRounds
	}
	c.keepEndedUnset = c.KeepEnded == 0
	switch {
	case c.keepEndedUnset:
		c.Core.KeepEnded = DefaultKeepEnded
	case c.KeepEnded < 0:
		c.Core.KeepEnded = 0 // all
	default:
		c.Core.KeepEnded = c.KeepEnded
	}
	if err := c.Core.Validate(); err != nil {
		return err
	}
	if c.Core.JobTimeoutSeconds == 0 {
		c.Core.JobTimeoutSeconds = DefaultJobTimeoutRounds * c.Core.RoundSeconds
	}
	if c.Core.LeaseGraceSeconds == 0 {
		c.Core.LeaseGraceSeconds = c.Core.RoundSeconds / 4
	}
	if c.LeaderTTL == 0 {
		c.LeaderTTL = defaultLeaderTTL(time.Duration(c.Core.RoundSeconds * float64(time.Second)))
	}
	c.Core.ExpireLeases = true
	name, err := policy.Canonical(c.Policy)
	if err != nil {
		return err
	}
	c.Policy = name
	if !policy.UsesGavelRound(name) {
		c.PolicyOptions.ReallocateOnChange = false // recorded only where it means something
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.JobSeries == 0 {
		c.JobSeries = DefaultJobSeries
	}
	return nil
}
