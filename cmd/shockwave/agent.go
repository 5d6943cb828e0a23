package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/agent"
	"github.com/shockwave-sched/shockwave/protocol"
)

func init() {
	commands["agent"] = command{summary: "run a node agent: join the coordinator, run the jobs placed on this node", run: runAgent}
	commands["submit"] = command{summary: "submit a command as a job (submit --workers W -- COMMAND ARGS…)", run: runSubmit}
	commands["cancel"] = command{summary: "cancel a job (cancel JOB)", run: runCancel}
}

// clientFlags are the connection flags of the client commands.
type clientFlags struct {
	url, creds, token, prefix string
	timeout                   time.Duration
	tls                       tlsFlags
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.url, "nats-url", nats.DefaultURL, "NATS address of the coordinator")
	fs.StringVar(&c.creds, "creds", "", "credentials `FILE` (shockwave creds issue --admin NAME, or --agent NODE)")
	fs.StringVar(&c.token, "token", "", "shared token (--auth token; default $SHOCKWAVE_TOKEN)")
	fs.StringVar(&c.prefix, "prefix", protocol.DefaultPrefix, "subject prefix")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long to wait for the coordinator")
	c.tls.register(fs)
}

func (c *clientFlags) connect(name string, extra ...nats.Option) (*nats.Conn, protocol.Subjects, error) {
	subj, err := protocol.NewSubjects(c.prefix)
	if err != nil {
		return nil, subj, usageError{err}
	}
	if c.token == "" {
		c.token = os.Getenv("SHOCKWAVE_TOKEN")
	}
	opts, err := c.tls.options()
	if err != nil {
		return nil, subj, err
	}
	opts = append(opts, nats.Name(name), nats.Timeout(c.timeout))
	if c.creds != "" {
		opts = append(opts, nats.UserCredentials(c.creds))
	}
	if c.token != "" {
		opts = append(opts, nats.Token(c.token))
	}
	nc, err := nats.Connect(c.url, append(opts, extra...)...)
	if err != nil {
		return nil, subj, fmt.Errorf("connecting to %s: %w", c.url, err)
	}
	return nc, subj, nil
}

func runAgent(args []string, _, stderr io.Writer) error {
	var c clientFlags
	fs := newFlags("agent", stderr)
	c.register(fs)
	node := fs.String("node", "", "node name (required; letters, digits, '-', '_')")
	gpus := fs.Int("gpus", 0, "GPUs of this node (default: counted with nvidia-smi -L, else 1 fake GPU)")
	gpuType := fs.String("gpu-type", "", "GPU type label")
	addr := fs.String("addr", "", "host other nodes reach this one at, for multi-node jobs (default: the node name)")
	workDir := fs.String("work-dir", "./shockwave-work", "shared `DIR` of job checkpoints and output (the same on every node)")
	jobURL := fs.String("job-nats-url", "", "NATS address given to jobs (default: --nats-url)")
	jobCert := fs.String("job-tls-cert", "", "client certificate `FILE` (PEM) given to jobs, for a coordinator with mutual TLS (jobs are also given --tls-ca)")
	jobKey := fs.String("job-tls-key", "", "private key `FILE` of --job-tls-cert (PEM)")
	heartbeat := fs.Duration("heartbeat", agent.DefaultHeartbeat, "time between heartbeats")
	expiryGrace := fs.Duration("expiry-grace", agent.DefaultExpiryGrace, "time past a grant's expiry before SIGTERM")
	killGrace := fs.Duration("kill-grace", agent.DefaultKillGrace, "time from SIGTERM to SIGKILL")
	relay := fs.Bool("relay", true, "relay each job's leases to its processes through a pipe ($SHOCKWAVE_LEASE_FD); --relay=false leaves them to NATS only")
	uplink := fs.Bool("uplink", true, "carry the registrations and event batches of single-process jobs up through the agent's connection ($SHOCKWAVE_UPLINK_FD; with --relay only); --uplink=false leaves them to the jobs' own NATS connections")
	jobSocket := fs.String("job-socket", "", "`PATH` of a Unix socket through which resident jobs of this node send their registrations and events and receive their leases ($SHOCKWAVE_AGENT_SOCKET; default: none)")
	jobSocketMode := fs.String("job-socket-mode", "0600", "octal file mode of --job-socket: who may connect")
	logFormat := fs.String("log-format", "console", "log format: json or console")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	mode, err := strconv.ParseUint(*jobSocketMode, 8, 32)
	if err != nil || mode > 0o777 || mode == 0 {
		return badInput("--job-socket-mode %q: want octal permission bits such as 0600 or 0660", *jobSocketMode)
	}
	if err := protocol.ValidateNodeName("agent", "node", *node); err != nil {
		return badInput("--node: %v", err)
	}
	if *gpus < 0 || *gpus > 1024 {
		return badInput("--gpus: %d out of range [1, 1024]", *gpus)
	}
	if *heartbeat <= 0 || *expiryGrace < 0 || *killGrace <= 0 {
		return badInput("--heartbeat, --expiry-grace and --kill-grace must be positive")
	}
	if *jobSocket != "" {
		if *jobSocket, err = filepath.Abs(*jobSocket); err != nil {
			return badInput("--job-socket: %v", err)
		}
	}
	log, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	n := *gpus
	if n == 0 {
		if found, ok := agent.DetectGPUs(context.Background()); ok && found > 0 {
			n = found
			log.Info().Int("gpus", n).Msg("GPUs found with nvidia-smi -L")
		} else {
			n = 1
			log.Warn().Msg("no nvidia-smi: one fake GPU (set --gpus)")
		}
	}
	jobTLS := tlsFlags{ca: c.tls.ca, cert: *jobCert, key: *jobKey}
	if (jobTLS.cert == "") != (jobTLS.key == "") {
		return badInput("--job-tls-cert and --job-tls-key go together")
	}
	for _, p := range []*string{&jobTLS.ca, &jobTLS.cert, &jobTLS.key} {
		if *p == "" {
			continue
		}
		if _, err := os.Stat(*p); err != nil {
			return badInput("%v (a TLS file given to jobs)", err)
		}
		if *p, err = filepath.Abs(*p); err != nil {
			return badInput("%v", err)
		}
	}
	var extra []nats.Option
	subj, err := protocol.NewSubjects(c.prefix)
	if err != nil {
		return usageError{err}
	}
	if c.creds != "" {
		extra = append(extra, nats.CustomInboxPrefix(subj.AgentInbox(*node)))
	}
	extra = append(extra, nats.MaxReconnects(-1), nats.ReconnectWait(500*time.Millisecond))
	nc, _, err := c.connect("shockwave-agent-"+*node, extra...)
	if err != nil {
		return err
	}
	defer nc.Close()
	dir, err := filepath.Abs(*workDir)
	if err != nil {
		return badInput("--work-dir: %v", err)
	}
	url := *jobURL
	if url == "" {
		url = c.url
	}
	a, err := agent.New(agent.Config{Node: *node, GPUs: n, Type: *gpuType, Addr: *addr, Conn: nc, Prefix: c.prefix,
		URL: url, Token: c.token, FetchCreds: c.creds != "", WorkDir: dir, Heartbeat: *heartbeat,
		TLSCA: jobTLS.ca, TLSCert: jobTLS.cert, TLSKey: jobTLS.key,
		ExpiryGrace: *expiryGrace, KillGrace: *killGrace, NoRelay: !*relay, NoUplink: !*uplink, Logger: &log,
		JobSocket: *jobSocket, JobSocketMode: os.FileMode(mode)})
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signalContext()
	defer stop()
	return a.Run(ctx)
}

// envList collects repeated --env K=V flags.
type envList []string

func (e *envList) String() string { return strings.Join(*e, ",") }
func (e *envList) Set(v string) error {
	if err := protocol.ValidateEnv("--env", "env", v); err != nil {
		return err
	}
	*e = append(*e, v)
	return nil
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// newJobID is a readable, unguessable job id: the name (or the command's
// base name) and 8 random hex digits.
func newJobID(name, command string) string {
	base := name
	if base == "" {
		base = filepath.Base(command)
	}
	base = strings.Trim(unsafeID.ReplaceAllString(base, "-"), "-")
	if len(base) > 40 {
		base = base[:40]
	}
	if base == "" {
		base = "job"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return base + "-" + hex.EncodeToString(b)
}

func runSubmit(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := newFlags("submit", stderr)
	c.register(fs)
	workers := fs.Int("workers", 1, "gang width: GPUs the job needs whenever it runs")
	name := fs.String("name", "", "label shown by status; the job id starts with it")
	ranks := fs.Int("ranks-per-node", 1, "processes per node of the grant; the node's devices are split among them")
	retries := fs.Int("max-retries", 3, "restarts after non-zero exits before the job fails")
	var env envList
	fs.Var(&env, "env", "`K=V` set in the job's environment (repeatable)")
	if err := parseFlagsAndArgs(fs, args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return badInput("no command: shockwave submit [flags] -- COMMAND ARGS…")
	}
	s := protocol.Submit{V: protocol.Version, Name: *name, Command: argv, Workers: *workers, Env: env,
		RanksPerNode: *ranks, MaxRetries: *retries}
	s.Job = newJobID(*name, argv[0])
	if err := s.Validate(); err != nil {
		return usageError{err}
	}
	rep, err := request(&c, "shockwave-submit", func(subj protocol.Subjects) string { return subj.Submit() }, s)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, rep.Job)
	return nil
}

func runCancel(args []string, stdout, stderr io.Writer) error {
	var c clientFlags
	fs := newFlags("cancel", stderr)
	c.register(fs)
	job, err := parseOneArg(fs, args, "JOB")
	if err != nil {
		return err
	}
	req := protocol.Cancel{V: protocol.Version, Job: job}
	if err := req.Validate(); err != nil {
		return usageError{err}
	}
	rep, err := request(&c, "shockwave-cancel", func(subj protocol.Subjects) string { return subj.Cancel() }, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n", rep.Job, rep.State)
	return nil
}

// request sends a submission or cancellation, retrying on silence (the log
// stores a retried submission once: its id is the deduplication key).
func request(c *clientFlags, name string, subject func(protocol.Subjects) string, v any) (*protocol.SubmitReply, error) {
	nc, subj, err := c.connect(name)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	data, _ := json.Marshal(v)
	deadline := time.Now().Add(c.timeout)
	for {
		m, err := nc.Request(subject(subj), data, min(2*time.Second, c.timeout))
		if err != nil {
			if time.Now().Before(deadline) && (errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)) {
				time.Sleep(250 * time.Millisecond)
				continue
			}
			return nil, fmt.Errorf("no answer on %s from a coordinator at %s: %w", subject(subj), c.url, err)
		}
		rep, err := protocol.DecodeSubmitReply(m.Data, 1<<20)
		if err != nil {
			return nil, err
		}
		if rep.Error != nil {
			if rep.Error.Code == protocol.CodeBadRequest || rep.Error.Code == protocol.CodeRejected || rep.Error.Code == protocol.CodeConflict {
				return nil, usageError{fmt.Errorf("coordinator: %s", rep.Error.Message)}
			}
			return nil, fmt.Errorf("coordinator: %s", rep.Error.Message)
		}
		return rep, nil
	}
}
