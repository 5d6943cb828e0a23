package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Defaults of Config.
const (
	DefaultHeartbeat   = 2 * time.Second
	DefaultExpiryGrace = 5 * time.Second
	DefaultKillGrace   = 10 * time.Second
)

// Config sets up an agent. Zero values mean the documented defaults.
type Config struct {
	Node string // node name (required)
	GPUs int    // devices on the node (required)
	Type string // GPU type label
	Addr string // host other nodes reach this one at (default: the node name)

	// Conn is the agent's NATS connection (required). In creds mode it
	// must use the agent's credentials and its inbox prefix
	// (protocol.Subjects.AgentInbox).
	Conn   *nats.Conn
	Prefix string // subject prefix (default protocol.DefaultPrefix)
	// URL is the NATS address given to jobs (SHOCKWAVE_NATS_URL, required).
	URL string
	// Token is given to jobs in token mode (SHOCKWAVE_TOKEN).
	Token string
	// FetchCreds makes the agent fetch each job's credentials from the
	// coordinator (creds mode) and pass them as SHOCKWAVE_CREDS.
	FetchCreds bool
	// WorkDir holds each job's checkpoint directory (WorkDir/<job>, passed
	// as SHOCKWAVE_CHECKPOINT_DIR) and output (WorkDir/<job>/output.log).
	// Agents of one cluster share it, so that a job resumes on any node.
	WorkDir string
	// TLSCA, TLSCert and TLSKey are given to jobs as SHOCKWAVE_TLS_CA,
	// SHOCKWAVE_TLS_CERT and SHOCKWAVE_TLS_KEY (when set): the CA of the
	// server's certificate and the jobs' client certificate and key.
	// They override what a submission's env says.
	TLSCA, TLSCert, TLSKey string
	// Env is the base environment of jobs (default os.Environ() without
	// the variables the agent sets).
	Env []string

	// NoRelay turns off the lease relay: by default the agent gives every
	// process it starts a pipe (protocol.EnvLeaseFD) and writes the job's
	// leases into it, so that the coordinator need not publish them to
	// each job (docs/agent.md, "Leases relayed by the agent").
	NoRelay bool
	// NoUplink turns off the uplink: by default a relaying agent also
	// gives each process of a single-process job a socket
	// (protocol.EnvUplinkFD) through which the agent forwards its
	// registrations and event batches, so that the process needs no NATS
	// connection of its own (docs/agent.md, "The uplink").
	NoUplink bool
	// JobSocket is the path of a Unix socket on which the agent carries
	// the traffic of resident jobs it did not start, as the uplink does
	// for its own processes (docs/agent.md, "The job socket"; empty: no
	// socket). JobSocketMode is the socket file's mode (default 0600): it
	// decides who may connect.
	JobSocket     string
	JobSocketMode os.FileMode
	// Shortened by tests: the wait for a hello (default 5s) and the
	// connections served at once (default 1,024).
	jobHelloTimeout time.Duration
	jobSocketConns  int

	Heartbeat   time.Duration // between heartbeats (default 2s)
	ExpiryGrace time.Duration // past a grant's expiry before SIGTERM (default 5s)
	KillGrace   time.Duration // from SIGTERM to SIGKILL (default 10s)
	Logger      *zerolog.Logger
}

func (c *Config) validate() error {
	if err := protocol.ValidateNodeName("agent", "node", c.Node); err != nil {
		return err
	}
	switch {
	case c.GPUs < 1 || c.GPUs > 1024:
		return fmt.Errorf("agent: %d GPUs out of range [1, 1024]", c.GPUs)
	case c.Conn == nil:
		return errors.New("agent: no NATS connection")
	case c.URL == "":
		return errors.New("agent: no NATS URL for jobs")
	case c.WorkDir == "":
		return errors.New("agent: no work directory")
	}
	if c.Prefix == "" {
		c.Prefix = protocol.DefaultPrefix
	}
	if c.Addr == "" {
		c.Addr = c.Node
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.ExpiryGrace <= 0 {
		c.ExpiryGrace = DefaultExpiryGrace
	}
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if err := c.validateJobSocket(); err != nil {
		return err
	}
	if c.Env == nil {
		c.Env = baseEnv(os.Environ())
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	return nil
}

// Agent runs the jobs the coordinator places on one node.
type Agent struct {
	cfg   Config
	subj  protocol.Subjects
	log   zerolog.Logger
	hello protocol.AgentHello
	creds string // private directory of fetched job credentials
	// uplinks forwards the processes' registrations and batches (nil:
	// the agent gives its processes no uplink).
	uplinks *uplinkHub
	// jobs serves the job socket (nil: none).
	jobs *jobSocket

	box   *mailbox // desired states for the loop (mailbox.go)
	exits chan exit
	// Owned by Run's loop.
	last     *desiredAt
	runs     map[runKey]*run
	finished map[runKey]bool
}

// desiredAt is a desired state and when the agent received it.
type desiredAt struct {
	d  *protocol.NodeDesired
	at time.Time
	// joined: the answer to a join, which starts the agent's view afresh
	// (a coordinator with a new log starts its epochs again).
	joined bool
}

// supersedes reports whether d replaces last: a join's answer always does;
// otherwise a higher leader epoch does, and within one epoch a state at
// least as new. A state from a lower epoch, i.e. from a deposed leader
// that has not noticed yet, never does.
func (d *desiredAt) supersedes(last *desiredAt) bool {
	switch {
	case last == nil || d.joined:
		return true
	case d.d.Epoch != last.d.Epoch:
		return d.d.Epoch > last.d.Epoch
	}
	return d.d.Now >= last.d.Now
}

// deadline converts a coordinator time to the agent's clock.
func (d *desiredAt) deadline(t float64) time.Time {
	return d.at.Add(time.Duration((t - d.d.Now) * float64(time.Second)))
}

// New returns an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	subj, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, subj: subj, log: cfg.Logger.With().Str("node", cfg.Node).Logger(),
		hello: protocol.AgentHello{V: protocol.Version, Node: cfg.Node, GPUs: cfg.GPUs, Type: cfg.Type, Addr: cfg.Addr,
			Relay: !cfg.NoRelay},
		box: newMailbox(), exits: make(chan exit, 64),
		runs: map[runKey]*run{}, finished: map[runKey]bool{}}
	if !cfg.NoRelay && !cfg.NoUplink {
		a.uplinks = newUplinkHub(cfg.Conn, subj, cfg.Node, a.log)
		a.uplinks.hello, _ = json.Marshal(a.hello)
	}
	if cfg.JobSocket != "" {
		a.jobs = a.newJobSocket()
	}
	return a, nil
}

// Run joins and reconciles until ctx is done; then it stops every process
// (SIGTERM, SIGKILL after KillGrace) and returns.
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(a.cfg.WorkDir, 0o755); err != nil {
		return fmt.Errorf("agent: work directory: %w", err)
	}
	dir, err := os.MkdirTemp("", "shockwave-agent-"+a.cfg.Node+"-")
	if err != nil {
		return fmt.Errorf("agent: credentials directory: %w", err)
	}
	a.creds = dir
	defer os.RemoveAll(dir)
	if a.jobs != nil {
		if err := a.jobs.listen(); err != nil {
			return err
		}
		defer a.jobs.close()
	}
	sub, err := a.cfg.Conn.Subscribe(a.subj.Desired(a.cfg.Node), func(m *nats.Msg) {
		d, err := protocol.DecodeNodeDesired(m.Data, 64<<20)
		if err != nil || d.Node != a.cfg.Node {
			a.log.Warn().Err(err).Msg("desired state dropped")
			return
		}
		a.offer(d, false)
	})
	if err != nil {
		return fmt.Errorf("agent: subscribe: %w", err)
	}
	defer sub.Unsubscribe()
	if err := a.join(ctx); err != nil {
		return err
	}
	go a.heartbeats(ctx)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.stopAll()
			return nil
		case <-a.box.ready:
			d, ok := a.box.take()
			switch {
			case !ok:
			case d.supersedes(a.last):
				a.apply(&d)
			case d.d.Epoch < a.last.d.Epoch:
				a.log.Warn().Uint64("epoch", d.d.Epoch).Uint64("leader_epoch", a.last.d.Epoch).
					Msg("desired state from a deposed leader ignored")
			}
		case e := <-a.exits:
			a.exited(ctx, e)
		case <-tick.C:
			a.pollUplinks()
			a.enforce()
			a.startWanted()
		}
	}
}

func (a *Agent) offer(d *protocol.NodeDesired, joined bool) {
	a.box.put(desiredAt{d: d, at: time.Now(), joined: joined})
}

// request sends v on subject and decodes an AgentReply.
func (a *Agent) request(ctx context.Context, subject string, v any) (*protocol.AgentReply, error) {
	data, _ := json.Marshal(v)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := a.cfg.Conn.RequestWithContext(rctx, subject, data)
	if err != nil {
		return nil, err
	}
	rep, err := protocol.DecodeAgentReply(m.Data, 64<<20)
	if err != nil {
		return nil, err
	}
	if rep.Error != nil {
		return rep, rep.Error
	}
	return rep, nil
}

// join retries until the coordinator answers; a refusal is returned.
func (a *Agent) join(ctx context.Context) error {
	wait := 250 * time.Millisecond
	for {
		rep, err := a.request(ctx, a.subj.AgentJoin(a.cfg.Node), a.hello)
		var perr *protocol.Error
		switch {
		case err == nil:
			a.log.Info().Int("gpus", a.cfg.GPUs).Msg("joined")
			if rep.Desired != nil {
				a.offer(rep.Desired, true)
			}
			return nil
		case errors.As(err, &perr) && perr.Code != protocol.CodeUnavailable:
			return fmt.Errorf("agent: the coordinator refused the join: %w", err)
		}
		a.log.Debug().Err(err).Msg("join: no answer yet")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// heartbeats runs until ctx is done; a heartbeat answered "unknown node"
// makes the agent join again (the node timed out, or a new log).
func (a *Agent) heartbeats(ctx context.Context) {
	t := time.NewTicker(a.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep, err := a.request(ctx, a.subj.AgentHeartbeat(a.cfg.Node), a.hello)
		var perr *protocol.Error
		switch {
		case err == nil && rep.Desired != nil:
			a.offer(rep.Desired, false)
		case errors.As(err, &perr) && perr.Code == protocol.CodeUnknownNode:
			a.log.Warn().Msg("the coordinator does not count this node as joined; joining again")
			if err := a.join(ctx); err != nil && ctx.Err() == nil {
				a.log.Error().Err(err).Msg("rejoin")
			}
		case err != nil && ctx.Err() == nil:
			a.log.Debug().Err(err).Msg("heartbeat")
		}
	}
}

// apply takes a new desired state: renewed grants move their deadline,
// runs of a superseded attempt stop now, new assignments start.
func (a *Agent) apply(d *desiredAt) {
	a.last = d
	want := make(map[runKey]protocol.Assignment, len(d.d.Jobs))
	attempt := map[string]int{}
	for _, as := range d.d.Jobs {
		want[keyOf(as)] = as
		attempt[as.Job] = as.Attempt
	}
	now := time.Now()
	for k, r := range a.runs {
		as, ok := want[k]
		if ok {
			r.deadline = d.deadline(as.Expiry).Add(a.cfg.ExpiryGrace)
			a.relayRun(r, as.Lease)
			continue
		}
		a.relaySuspend(r, d.d)
		if at, ok := attempt[k.job]; ok && at > k.attempt && r.deadline.After(now) {
			r.deadline = now // a failed attempt's other processes stop at once
		}
	}
	if a.jobs != nil {
		a.jobs.relay(d.d) // the resident jobs' leases (jobsocket.go)
	}
	for k := range a.finished {
		if _, ok := want[k]; !ok {
			delete(a.finished, k)
		}
	}
	a.startWanted()
}

// startWanted starts the wanted runs whose devices are free.
func (a *Agent) startWanted() {
	if a.last == nil {
		return
	}
	busy := map[int]bool{}
	for _, r := range a.runs {
		for _, x := range r.as.Devices {
			busy[x] = true
		}
	}
	now := time.Now()
	for _, as := range a.last.d.Jobs {
		k := keyOf(as)
		if a.runs[k] != nil || a.finished[k] || slices.ContainsFunc(as.Devices, func(x int) bool { return busy[x] || x >= a.cfg.GPUs }) {
			continue
		}
		deadline := a.last.deadline(as.Expiry)
		if !deadline.After(now) {
			continue // the grant ended before it could start
		}
		r, err := a.start(as, deadline.Add(a.cfg.ExpiryGrace))
		if err != nil {
			a.log.Warn().Err(err).Str("job", as.Job).Msg("cannot start; retrying")
			continue
		}
		a.runs[k] = r
		for _, x := range as.Devices {
			busy[x] = true
		}
	}
}

// credsFile fetches job's credentials into the private directory.
func (a *Agent) credsFile(job string) (string, error) {
	data, _ := json.Marshal(protocol.CredsRequest{V: protocol.Version, Node: a.cfg.Node, Job: job})
	m, err := a.cfg.Conn.Request(a.subj.AgentCreds(a.cfg.Node), data, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("fetching credentials: %w", err)
	}
	rep, err := protocol.DecodeCredsReply(m.Data, 1<<20)
	if err == nil && rep.Error != nil {
		err = rep.Error
	}
	if err != nil {
		return "", fmt.Errorf("fetching credentials: %w", err)
	}
	path := filepath.Join(a.creds, job+".creds")
	return path, os.WriteFile(path, []byte(rep.Creds), 0o600)
}

// report tells the coordinator a run ended, retrying until it answers.
func (a *Agent) report(ctx context.Context, rep protocol.AgentReport) {
	for wait := 250 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 5*time.Second) {
		_, err := a.request(ctx, a.subj.AgentReport(a.cfg.Node), rep)
		var perr *protocol.Error
		if err == nil || (errors.As(err, &perr) && perr.Code != protocol.CodeUnavailable) {
			if err != nil {
				a.log.Warn().Err(err).Str("job", rep.Job).Msg("report refused")
			}
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}
