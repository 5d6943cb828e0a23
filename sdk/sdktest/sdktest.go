// Package sdktest runs a real coordinator for tests of code that uses the
// SDK: an embedded NATS server with JetStream listening on a loopback port,
// and a coordinator.Service on it. It imports the coordinator (and so the
// NATS server); package sdk itself never does.
package sdktest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// Config sets up a test coordinator. Zero values: 1 GPU, 0.2 s rounds,
// gandiva_fair, and, like a live coordinator (--reallocate-on-change), the
// Gavel-round policies re-allocating as soon as a job arrives or leaves
// while a GPU would stay idle; see OriginalResets.
type Config struct {
	GPUs       int
	Round      time.Duration
	Policy     string
	JobTimeout time.Duration // default 3 rounds
	// Cluster, when set, is the coordinator's nodes (GPUs is then ignored).
	Cluster topology.Cluster
	// SnapshotRounds is the service's snapshot interval (0: its default,
	// every round). Snapshots compact the log, so a test that reads the
	// events the log stored sets it beyond the test's length.
	SnapshotRounds int
	// TLS, when set, makes the server speak TLS only (with TLS.CA, it
	// also requires client certificates signed by that CA); ClientTLS
	// are the options of Client's connections then (e.g.
	// coordinator.ClientTLSOptions).
	TLS       *coordinator.TLSFiles
	ClientTLS []nats.Option
	// PolicyOptions configures the policy (e.g. Tiresias' thresholds).
	// Its ReallocateOnChange is set from OriginalResets.
	PolicyOptions policy.Options
	// OriginalResets keeps the original's rule for the Gavel-round
	// policies (gandiva_fair, gavel, themis, ...): they re-allocate at most
	// every policy.DefaultMinResetSeconds, so a job that registers after
	// the first round does not run for 1,000 s (--reallocate-on-change=false).
	OriginalResets bool
	// LeaseRounds is the rounds a RUN lease covers (0: the service's
	// default).
	LeaseRounds int
}

// Coordinator is a running embedded server and coordinator service.
type Coordinator struct {
	t    testing.TB
	cfg  Config
	dir  string
	port int
	emb  *coordinator.Embedded
	nc   *nats.Conn
	stop context.CancelFunc
	done chan error
	Subj protocol.Subjects
}

// Start starts a coordinator; it stops when the test ends.
func Start(t testing.TB, cfg Config) *Coordinator {
	t.Helper()
	if cfg.GPUs == 0 && len(cfg.Cluster.Nodes) == 0 {
		cfg.GPUs = 1
	}
	if cfg.Round == 0 {
		cfg.Round = 200 * time.Millisecond
	}
	if cfg.Policy == "" {
		cfg.Policy = "gandiva_fair"
	}
	c := &Coordinator{t: t, cfg: cfg, dir: t.TempDir(), port: -1, Subj: protocol.Subjects{Prefix: protocol.DefaultPrefix}}
	c.Up()
	t.Cleanup(c.Down)
	return c
}

// URL is the client URL (stable across Down and Up).
func (c *Coordinator) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(c.port) }

// Up starts the server (on the same port and data directory as before, if
// it ran before) and the service, and waits until the service replayed its
// log.
func (c *Coordinator) Up() {
	c.t.Helper()
	var err error
	for attempt := 0; ; attempt++ {
		c.emb, err = coordinator.StartEmbedded(coordinator.EmbeddedConfig{
			Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)), DataDir: c.dir, TLS: c.cfg.TLS})
		if err == nil || attempt == 50 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the port of the previous server may linger briefly
	}
	if err != nil {
		c.t.Fatalf("sdktest: starting NATS: %v", err)
	}
	if c.port < 0 {
		c.port = c.emb.Server.Addr().(*net.TCPAddr).Port
	}
	if c.nc, err = c.emb.Connect(); err != nil {
		c.t.Fatal(err)
	}
	opts := c.cfg.PolicyOptions
	opts.ReallocateOnChange = !c.cfg.OriginalResets // the service drops it for other policies
	svc, err := coordinator.NewService(c.nc, coordinator.ServiceConfig{Policy: c.cfg.Policy, PolicyOptions: opts, SnapshotRounds: c.cfg.SnapshotRounds,
		Core: coordinator.Config{GPUs: c.cfg.GPUs, Cluster: c.cfg.Cluster, RoundSeconds: c.cfg.Round.Seconds(),
			JobTimeoutSeconds: c.cfg.JobTimeout.Seconds(), LeaseRounds: c.cfg.LeaseRounds}})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stop, c.done = cancel, make(chan error, 1)
	go func() { c.done <- svc.Run(ctx) }()
	Eventually(c.t, 10*time.Second, "the coordinator serves", func() bool { return svc.Health().OK })
}

// Down stops the service and the server, as if the coordinator died.
func (c *Coordinator) Down() {
	if c.stop == nil {
		return
	}
	c.stop()
	if err := <-c.done; err != nil {
		c.t.Errorf("sdktest: coordinator: %v", err)
	}
	c.nc.Close()
	c.emb.Shutdown()
	c.stop = nil
}

// Client opens a NATS connection to the server with the coordinator's
// rights (it may publish leases and read the log).
func (c *Coordinator) Client() *nats.Conn {
	c.t.Helper()
	opts, err := c.emb.CoordinatorOptions()
	if err != nil {
		c.t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL(), append(opts, c.cfg.ClientTLS...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// JobClient opens a NATS connection with a job's rights (no credentials:
// in the embedded server's none mode, the JOBS account), for tests that
// act as a job or a process holding a job's credentials.
func (c *Coordinator) JobClient() *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(c.URL(), c.cfg.ClientTLS...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// Status asks the coordinator for its job table and last plan.
func (c *Coordinator) Status() *protocol.StatusReply {
	c.t.Helper()
	m, err := c.nc.Request(c.Subj.Status(), nil, 5*time.Second)
	if err != nil {
		c.t.Fatalf("sdktest: status: %v", err)
	}
	rep, err := protocol.DecodeStatusReply(m.Data, 64<<20)
	if err != nil {
		c.t.Fatalf("sdktest: status reply: %v", err)
	}
	return rep
}

// Job returns one job's row of the status table.
func (c *Coordinator) Job(id string) (protocol.JobInfo, bool) {
	for _, j := range c.Status().Jobs {
		if j.Job == id {
			return j, true
		}
	}
	return protocol.JobInfo{}, false
}

// PublishLease publishes a lease on the job's lease subject, as the
// coordinator would (for latency measurements and fault injection).
func (c *Coordinator) PublishLease(nc *nats.Conn, l protocol.Lease) {
	c.t.Helper()
	l.V = protocol.Version
	data, _ := json.Marshal(l)
	if err := nc.Publish(c.Subj.Lease(l.Job), data); err != nil {
		c.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		c.t.Fatal(err)
	}
}

// Eventually polls cond until it holds, failing the test after within.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// String describes the coordinator.
func (c *Coordinator) String() string {
	return fmt.Sprintf("coordinator at %s (%d GPUs, %v rounds, %s)", c.URL(), c.cfg.GPUs, c.cfg.Round, c.cfg.Policy)
}
