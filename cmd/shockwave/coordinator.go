package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

func init() {
	commands["coordinator"] = command{summary: "run the coordinator service (embedded NATS by default)", run: runCoordinator}
}

// signalContext is how the coordinator learns to stop; tests replace it.
var signalContext = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

type coordFlags struct {
	listen, natsURL, natsCreds, authority, dataDir, policy, config     string
	http, prefix                                                       string
	auth, token, tokenFile, logFormat, logLevel, info                  string
	tlsCert, tlsKey, tlsCA, nodes, cluster                             string
	gpus, maxMessage, replicas, maxJobs, maxJobsPerClient, leaseRounds int
	floodLimit, jobSeries, connAdvice, keepEnded                       int
	round, jobTimeout, leaseGrace, leaderTTL                           time.Duration
	agentTimeout, carryWindow                                          time.Duration
	agents                                                             bool
	reallocate, gcHold                                                 bool
	fs                                                                 *flag.FlagSet // the parsed flags (which were given)
	durability                                                         durabilityFlags
	emb                                                                *coordinator.Embedded // set by connect when embedded
}

// durabilityFlags are the snapshot and recovery settings (docs/durability.md).
type durabilityFlags struct {
	recover        bool
	snapshotRounds int
	logMaxBytes    int64
}

func (d *durabilityFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&d.recover, "recover-from-snapshot", false, "start from the newest good snapshot when the log or the snapshots are damaged, discarding what was lost (logged); without it a damaged log stops the coordinator")
	fs.IntVar(&d.snapshotRounds, "snapshot-rounds", coordinator.DefaultSnapshotRounds, "snapshot the state and compact the log every this many rounds")
	fs.Int64Var(&d.logMaxBytes, "log-max-bytes", 0, "refuse new log records past this size (0: no limit; the log is compacted behind snapshots)")
}

func (d *durabilityFlags) apply(cfg *coordinator.ServiceConfig) error {
	if d.snapshotRounds < 1 || d.logMaxBytes < 0 {
		return badInput("--snapshot-rounds must be at least 1 and --log-max-bytes non-negative")
	}
	cfg.Recover, cfg.SnapshotRounds, cfg.LogMaxBytes = d.recover, d.snapshotRounds, d.logMaxBytes
	return nil
}

func (f *coordFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4222", "client address of the embedded NATS server")
	fs.StringVar(&f.natsURL, "nats-url", "", "connect to this NATS cluster instead of embedding a server")
	fs.StringVar(&f.natsCreds, "nats-creds", "", "credentials `FILE` for --nats-url")
	fs.StringVar(&f.authority, "authority", "", "with --nats-url to a `shockwave nats --auth creds` server: its credentials authority `DIR` (its DATA/auth), to connect as the coordinator and issue the job credentials agents fetch")
	fs.StringVar(&f.dataDir, "data-dir", "./shockwave-data", "JetStream storage and credentials of the embedded server")
	fs.IntVar(&f.gpus, "gpus", 0, "number of GPUs to schedule: one node, node-0 (or --nodes, --cluster)")
	fs.StringVar(&f.nodes, "nodes", "", "`NxK`: N nodes of K GPUs each, named node-0… (instead of --gpus)")
	fs.StringVar(&f.cluster, "cluster", "", "cluster description `FILE` (JSON: nodes with name, gpus, type; instead of --gpus)")
	fs.DurationVar(&f.round, "round", 120*time.Second, "round length (at least 1s)")
	fs.StringVar(&f.policy, "policy", "shockwave", "allocation policy: "+strings.Join(policy.Names(), ", "))
	fs.StringVar(&f.config, "config", "", "policy configuration `FILE` (JSON, e.g. the original's Shockwave config)")
	fs.StringVar(&f.info, "info", "", "what Shockwave's forecasts may read: `online` (events only; the default) or profile (each job's declared schedule); overrides the config's info key")
	fs.BoolVar(&f.reallocate, "reallocate-on-change", true, "Gavel-round baselines (gavel, themis, allox, mst, ossp, gandiva_fair): re-allocate as soon as jobs arrive or leave while GPUs are idle, not at most every 1,000 s as in the original (without the flag, a log written with the other rule goes on with it)")
	fs.StringVar(&f.http, "http", "", "serve the live web view (/), /api/state, /metrics and /healthz on `ADDR` (e.g. 127.0.0.1:9090; default off; no authentication)")
	fs.StringVar(&f.prefix, "prefix", protocol.DefaultPrefix, "subject prefix")
	fs.DurationVar(&f.jobTimeout, "job-timeout", 0, "mark a job lost after this long without events (default 3 rounds)")
	fs.DurationVar(&f.leaseGrace, "lease-grace", 0, "added to a lease's end to form its expiry (default a quarter round)")
	fs.IntVar(&f.leaseRounds, "lease-rounds", 0, fmt.Sprintf("rounds a RUN lease covers: a job keeping its GPUs gets a renewal every N-1 rounds (1: every round; default %d in a new log, the log's own when continuing one)", coordinator.DefaultLeaseRounds))
	fs.BoolVar(&f.agents, "agents", false, "the cluster is the set of live node agents (shockwave agent); --gpus may then be 0")
	fs.DurationVar(&f.agentTimeout, "agent-timeout", coordinator.DefaultAgentTimeout, "a node whose agent sends no heartbeat for this long leaves the cluster")
	fs.IntVar(&f.maxMessage, "max-message", protocol.DefaultMaxMessageBytes, "size limit of one message, in bytes")
	fs.IntVar(&f.replicas, "replicas", 1, "replicas of the log stream and snapshot bucket (clustered NATS)")
	fs.StringVar(&f.auth, "auth", "none", "embedded server authentication: none, token or creds")
	fs.StringVar(&f.token, "token", "", "shared token (--auth token; default $SHOCKWAVE_TOKEN)")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the shared token from `FILE`")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve client connections over TLS with this certificate `FILE` (PEM; needs --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key `FILE` of --tls-cert (PEM)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA `FILE` (PEM): with --tls-cert, require client certificates it signed; with --nats-url, trust the cluster's certificates it signed")
	fs.IntVar(&f.maxJobs, "max-jobs", coordinator.DefaultMaxJobs, "refuse new jobs while this many are pending or active")
	fs.IntVar(&f.floodLimit, "flood-limit", coordinator.DefaultFloodLimit, "embedded server: disconnect a job connection that publishes more than this many messages (or KiB) a second, and revoke its credential in creds mode or refuse its address new connections for a cooldown (0: off)")
	fs.IntVar(&f.keepEnded, "keep-ended", 0, fmt.Sprintf("ended and lost jobs the job table keeps; past it the one that left first is forgotten, with its event budget and submission (default %d in a new log, the log's own when continuing one; -1: all)", coordinator.DefaultKeepEnded))
	fs.IntVar(&f.connAdvice, "connections-advice", coordinator.DefaultConnectionsAdvice, "embedded server: log a warning when it holds more than this many client connections, the most it was measured to serve within the live targets on 2 cores with a connection per job (docs/scale.md), advising node agents or NATS run apart (0: never)")
	fs.IntVar(&f.maxJobsPerClient, "max-jobs-per-client", coordinator.DefaultMaxJobsPerClient, "refuse new jobs from a client (connection, or user in creds mode) that registered this many")
	fs.DurationVar(&f.leaderTTL, "leader-ttl", 0, "a standby takes over after the leader was silent this long (default two rounds, between 1s and 5s)")
	fs.IntVar(&f.jobSeries, "job-metrics", coordinator.DefaultJobSeries, "export per-job metric series (shockwave_job_rho, shockwave_job_forecast_remaining_seconds) for at most this many jobs, those with the highest projected ρ (0: none; shockwave_jobs_rho gives ρ's quantiles over every job)")
	fs.DurationVar(&f.carryWindow, "carry-window", time.Millisecond, "append the event batches node agents carry, and the registrations, to the log together: those that arrive within this long of the first of them to one record (at most 100ms; 0 or negative: one record each)")
	fs.BoolVar(&f.gcHold, "gc-hold", true, "raise the Go collector's percent (GOGC) fourfold from half a second (a tenth of the round when shorter) before each round's tick until its leases are sent, so that no collection slows the round (false: leave the collector alone)")
	fs.StringVar(&f.logFormat, "log-format", "json", "log format: json or console")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.durability.register(fs)
}

func runCoordinator(args []string, _, stderr io.Writer) error {
	var f coordFlags
	fs := newFlags("coordinator", stderr)
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	scfg, mode, err := f.validate()
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	scfg.Logger = &log
	ctx, stop := signalContext()
	defer stop()
	nc, shutdown, auth, err := f.connect(&log, mode)
	if err != nil {
		return err
	}
	scfg.Authority = auth
	defer shutdown()
	scfg.OwnServer = f.natsURL == "" // an embedded server, locked to this process
	defer nc.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	scfg.Metrics = coordinator.NewMetrics(reg)
	if f.emb != nil {
		reg.MustRegister(coordinator.EmbeddedMetrics(f.emb)...)
	}
	svc, err := coordinator.NewService(nc, scfg)
	if err != nil {
		return usageError{err}
	}
	if f.http != "" {
		if !coordinator.IsLoopback(f.http) {
			log.Warn().Str("http", f.http).Msg("the web view, /api/state and /metrics are read-only but unauthenticated: anyone who reaches this address sees job names, models and the plan")
		}
		srv, err := serveHTTP(f.http, coordinator.Handler(reg, svc), &log)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	cfg := svc.Config()
	log.Info().Str("policy", cfg.Policy).Int("gpus", cfg.Core.GPUs).Str("cluster", cfg.Core.Cluster.String()).Float64("round_s", cfg.Core.RoundSeconds).
		Bool("reallocate_on_change", cfg.PolicyOptions.ReallocateOnChange).
		Float64("job_timeout_s", cfg.Core.JobTimeoutSeconds).Str("prefix", cfg.Prefix).Msg("coordinator starting")
	err = svc.Run(ctx)
	log.Info().Msg("coordinator stopped")
	return err
}

// validate checks the flags and builds the service configuration.
func (f *coordFlags) validate() (coordinator.ServiceConfig, coordinator.AuthMode, error) {
	var cfg coordinator.ServiceConfig
	cluster, err := clusterFlags(f.nodes, f.cluster, f.gpus != 0)
	if err != nil {
		return cfg, "", err
	}
	switch {
	case f.gpus < 0 || (len(cluster.Nodes) == 0 && f.gpus == 0 && !f.agents):
		return cfg, "", badInput("--gpus: GPU count must be positive, got %d (or give --nodes NxK, --cluster FILE or --agents)", f.gpus)
	case f.round < time.Second || f.round > 24*time.Hour:
		return cfg, "", badInput("--round: %v out of range [1s, 24h]", f.round)
	case f.jobTimeout < 0 || (f.jobTimeout > 0 && f.jobTimeout < f.round):
		return cfg, "", badInput("--job-timeout: %v must be at least one round (%v)", f.jobTimeout, f.round)
	case f.leaseGrace < 0 || f.leaseGrace > f.round:
		return cfg, "", badInput("--lease-grace: %v out of range [0, %v]", f.leaseGrace, f.round)
	case f.leaseRounds < 0 || f.leaseRounds > coordinator.MaxLeaseRounds:
		return cfg, "", badInput("--lease-rounds: %d out of range [1, %d]", f.leaseRounds, coordinator.MaxLeaseRounds)
	case f.agentTimeout < 100*time.Millisecond:
		return cfg, "", badInput("--agent-timeout: %v is shorter than 100ms", f.agentTimeout)
	case f.maxMessage < 1024 || f.maxMessage > 64<<20:
		return cfg, "", badInput("--max-message: %d out of range [1024, %d]", f.maxMessage, 64<<20)
	case f.replicas < 1 || f.replicas > 5:
		return cfg, "", badInput("--replicas: %d out of range [1, 5]", f.replicas)
	case f.maxJobs < 1 || f.maxJobsPerClient < 1:
		return cfg, "", badInput("--max-jobs and --max-jobs-per-client must be positive, got %d and %d", f.maxJobs, f.maxJobsPerClient)
	case f.leaderTTL < 0 || (f.leaderTTL > 0 && f.leaderTTL < 100*time.Millisecond) || f.leaderTTL > time.Minute:
		return cfg, "", badInput("--leader-ttl: %v out of range [100ms, 1m]", f.leaderTTL)
	case f.tlsCA != "" && f.tlsCert == "" && f.natsURL == "":
		return cfg, "", badInput("--tls-ca needs --tls-cert (the embedded server's TLS) or --nats-url")
	case f.tlsCert != "" && f.natsURL != "":
		return cfg, "", badInput("--tls-cert configures the embedded server; with --nats-url use --tls-ca")
	}
	if err := checkServerFlags(f.floodLimit, f.tlsCert, f.tlsKey, f.logFormat); err != nil {
		return cfg, "", err
	}
	if f.keepEnded < -1 {
		return cfg, "", badInput("--keep-ended: %d is below -1 (-1 keeps every ended job; 0 is the default)", f.keepEnded)
	}
	if f.connAdvice < 0 {
		return cfg, "", badInput("--connections-advice: %d is negative (0 turns the advice off)", f.connAdvice)
	}
	if err := protocol.ValidatePrefix(f.prefix); err != nil {
		return cfg, "", usageError{err}
	}
	mode, err := coordinator.ParseAuthMode(f.auth)
	if err != nil {
		return cfg, "", usageError{err}
	}
	if f.natsURL != "" && mode != coordinator.AuthNone {
		return cfg, "", badInput("--auth configures the embedded server; with --nats-url use --nats-creds, --token or --authority")
	}
	switch {
	case f.authority != "" && f.natsURL == "":
		return cfg, "", badInput("--authority goes with --nats-url (an embedded server in creds mode keeps its authority in --data-dir)")
	case f.authority != "" && (f.natsCreds != "" || f.token != "" || f.tokenFile != ""):
		return cfg, "", badInput("--authority is the coordinator's credential; drop --nats-creds, --token and --token-file")
	}
	name, err := policy.Canonical(f.policy)
	if err != nil {
		return cfg, "", usageError{err}
	}
	if err := checkTLSFiles(f.tlsCert, f.tlsKey, f.tlsCA); err != nil {
		return cfg, "", err
	}
	cfg = coordinator.ServiceConfig{Policy: name, Prefix: f.prefix, MaxMessageBytes: f.maxMessage, Replicas: f.replicas, AgentTimeout: f.agentTimeout,
		MaxJobs: f.maxJobs, MaxJobsPerClient: f.maxJobsPerClient, LeaderTTL: f.leaderTTL, KeepEnded: f.keepEnded,
		Core: coordinator.Config{GPUs: f.gpus, Cluster: cluster, Dynamic: f.agents, RoundSeconds: f.round.Seconds(),
			JobTimeoutSeconds: f.jobTimeout.Seconds(), LeaseGraceSeconds: f.leaseGrace.Seconds(), LeaseRounds: f.leaseRounds}}
	// Agents may carry resident jobs' traffic (their job socket) where
	// they hold the jobs' token anyway: none and token mode. With job
	// credentials (creds mode, or a coordinator dialing with creds) each
	// job's own credentials are the only way in.
	cfg.AgentsCarryResidents = mode != coordinator.AuthCreds && f.authority == "" && f.natsCreds == ""
	cfg.KeepGCPercent = !f.gcHold
	switch {
	case f.jobSeries < 0:
		return cfg, "", fmt.Errorf("--job-metrics %d: the number of jobs with per-job series may not be negative (0: none)", f.jobSeries)
	case f.jobSeries == 0:
		cfg.JobSeries = -1
	default:
		cfg.JobSeries = f.jobSeries
	}
	cfg.CarryWindow = f.carryWindow
	if f.carryWindow > coordinator.MaxCarryWindow {
		return cfg, "", fmt.Errorf("--carry-window %v: the carry window may be at most %v", f.carryWindow, coordinator.MaxCarryWindow)
	}
	if f.carryWindow == 0 {
		cfg.CarryWindow = -1 // 0 would mean the default
	}
	if err := f.durability.apply(&cfg); err != nil {
		return cfg, "", err
	}
	cfg.PolicyOptions.ReallocateOnChange = f.reallocate && policy.UsesGavelRound(name)
	set := false // a log written with the other rule goes on with it unless the flag says otherwise
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == "reallocate-on-change" })
	cfg.ReallocateFromLog = !set
	if err := f.policyConfig(&cfg, name); err != nil {
		return cfg, "", err
	}
	if f.token, err = readToken(f.token, f.tokenFile, true); err != nil {
		return cfg, "", err
	}
	if mode == coordinator.AuthToken && f.token == "" {
		return cfg, "", badInput("--auth token needs --token, --token-file or $SHOCKWAVE_TOKEN")
	}
	return cfg, mode, nil
}

// policyConfig reads --config and applies --info to it.
func (f *coordFlags) policyConfig(cfg *coordinator.ServiceConfig, name string) error {
	var raw []byte
	if f.config != "" {
		var err error
		if raw, err = os.ReadFile(f.config); err != nil {
			return badInput("--config: %v", err)
		}
		if !json.Valid(raw) {
			return badInput("--config: %s is not valid JSON", f.config)
		}
		cfg.PolicyOptions.Config = json.RawMessage(raw)
	}
	if f.info == "" {
		return nil
	}
	if f.info != policy.InfoOnline && f.info != policy.InfoProfile {
		return badInput("--info: unknown mode %q (want online or profile)", f.info)
	}
	if name != "shockwave" {
		return badInput("--info: only the shockwave policy forecasts (policy %s)", name)
	}
	keys := map[string]json.RawMessage{}
	if raw != nil {
		if err := json.Unmarshal(raw, &keys); err != nil {
			return badInput("--config: %s is not a JSON object: %v", f.config, err)
		}
	}
	keys["info"], _ = json.Marshal(f.info)
	merged, _ := json.Marshal(keys)
	if _, err := policy.ParseShockwaveConfig(merged); err != nil {
		return badInput("--config: %s: %v", f.config, err)
	}
	cfg.PolicyOptions.Config = json.RawMessage(merged)
	return nil
}

// connect embeds a server or dials the cluster; shutdown stops what it
// started. In creds mode it returns the credentials authority.
func (f *coordFlags) connect(log *zerolog.Logger, mode coordinator.AuthMode) (*nats.Conn, func(), *coordinator.Authority, error) {
	if f.natsURL != "" {
		opts := []nats.Option{nats.Name("shockwave-coordinator"), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)}
		if f.natsCreds != "" {
			opts = append(opts, nats.UserCredentials(f.natsCreds))
		}
		var auth *coordinator.Authority
		if f.authority != "" {
			var err error
			if auth, err = coordinator.LoadAuthority(f.authority, false); err != nil {
				return nil, nil, nil, badInput("--authority: %v", err)
			}
			o, err := auth.CoordinatorOption()
			if err != nil {
				return nil, nil, nil, err
			}
			opts = append(opts, o)
		}
		if f.token != "" {
			opts = append(opts, nats.Token(f.token))
		}
		opts = append(opts, coordinator.ClientTLSOptions(f.tlsCA, "", "")...)
		nc, err := nats.Connect(f.natsURL, opts...)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("connecting to %s: %w", f.natsURL, err)
		}
		log.Info().Str("url", f.natsURL).Msg("connected to NATS")
		return nc, func() {}, auth, nil
	}
	if mode == coordinator.AuthNone && !coordinator.IsLoopback(f.listen) {
		log.Warn().Str("listen", f.listen).Msg("no authentication on a non-loopback address: anyone who reaches it can register jobs and publish events; use --auth token or --auth creds")
	}
	ecfg := embeddedConfig(f.listen, f.dataDir, mode, f.token, f.prefix, f.floodLimit, f.tlsCert, f.tlsKey, f.tlsCA, log)
	ecfg.ConnectionsAdvice = cmp.Or(f.connAdvice, -1) // the flag's 0 is off
	emb, err := coordinator.StartEmbedded(ecfg)
	if err != nil {
		return nil, nil, nil, err
	}
	f.emb = emb
	log.Info().Str("url", emb.ClientURL()).Str("data_dir", f.dataDir).Str("auth", string(mode)).Bool("tls", f.tlsCert != "").Msg("embedded NATS with JetStream started")
	if p := emb.AdminSecretFile(f.dataDir); p != "" {
		log.Info().Str("admin_token_file", p).Msg("status and other admin requests: shockwave status --token-file " + p)
	}
	if mode == coordinator.AuthCreds {
		log.Info().Str("authority", filepath.Join(f.dataDir, "auth")).
			Msg("per-job credentials: shockwave creds issue --data-dir " + f.dataDir + " JOB")
	}
	nc, err := emb.Connect()
	if err != nil {
		emb.Shutdown()
		return nil, nil, nil, err
	}
	return nc, emb.Shutdown, emb.Authority(), nil
}

func newLogger(w io.Writer, format, level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Logger{}, badInput("--log-level: unknown level %q", level)
	}
	if format == "console" {
		// Colours only on a terminal: a file or a pipe gets plain text.
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func serveHTTP(addr string, h http.Handler, log *zerolog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, badInput("--http: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Str("web_view", "http://"+ln.Addr().String()+"/").Msg("serving the web view, /api/state, /metrics and /healthz")
	return srv, nil
}
