package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Environment variables read by Register as defaults; options override them.
// A launcher (Kubernetes, Slurm) sets them so the same binary runs anywhere.
const (
	EnvURL   = "SHOCKWAVE_NATS_URL"  // coordinator's NATS URL
	EnvCreds = "SHOCKWAVE_CREDS"     // per-job .creds file
	EnvToken = "SHOCKWAVE_TOKEN"     // shared token
	EnvJob   = "SHOCKWAVE_JOB_ID"    // job id
	EnvExit  = "SHOCKWAVE_EXIT_MODE" // "1": ExitOnSuspend
	EnvTLSCA = "SHOCKWAVE_TLS_CA"    // CA file (PEM) of the coordinator's TLS certificate
	// EnvTLSCert and EnvTLSKey are the job's client certificate and key
	// (PEM), for a NATS server that requires client certificates.
	EnvTLSCert = "SHOCKWAVE_TLS_CERT"
	EnvTLSKey  = "SHOCKWAVE_TLS_KEY"
)

// Option configures Register. Options return an error for a bad value, so
// that Register can name the option that was wrong.
type Option func(*options) error

// Hook is called by the Steps iterator at a suspension (OnSuspend: save a
// checkpoint, release the GPUs) and at the resumption after it (OnResume:
// take the granted GPUs back). lease is the lease that caused the call: the
// SUSPEND lease, or for a lease that expired without renewal, the expired
// RUN lease (Job.SuspendReason says which); the RUN lease on resume.
type Hook func(ctx context.Context, lease protocol.Lease) error

type options struct {
	url, creds, token string
	natsOpts          []nats.Option
	tlsCA             string
	tlsCert, tlsKey   string
	prefix            string

	job, name, model, mode string
	workers                int
	batchSize, dataset     int
	epochs                 int
	samples, steps         int64
	schedule               *protocol.Schedule
	priority, throughput   float64
	isolated               float64
	resume                 *Checkpoint

	exitMode          bool
	onSuspend         Hook
	onResume          Hook
	log               *slog.Logger
	buffer            int
	sampleEvery       time.Duration
	registerTimeout   time.Duration
	requestTimeout    time.Duration
	reconnectWait     time.Duration
	reconnectWaitMax  time.Duration
	closeFlushTimeout time.Duration

	// Multi-process jobs and resident processes (options_ranks.go).
	rank, world, localRank int
	rankSet, localSet      bool
	rankTimeout, rankJoin  time.Duration
	rankBeat, lookahead    time.Duration
	node                   string
	visible                []int

	// The agent's lease pipe ($SHOCKWAVE_LEASE_FD; leasefd.go): 0 when
	// there is none.
	leaseFD  int
	leaseIno uint64
	// The agent's uplink ($SHOCKWAVE_UPLINK_FD; uplink.go): 0 when there
	// is none or WithoutUplink.
	uplinkFD  int
	uplinkIno uint64
	noUplink  bool

	agentSocket, agentSocketFrom string // the agent's job socket and what named it (jobsocket.go)
}

// Defaults of the tunables.
const (
	DefaultBuffer          = 1024             // events kept while the coordinator is unreachable
	DefaultRegisterTimeout = 30 * time.Second // Register retries until then
	DefaultReconnectWait   = 250 * time.Millisecond
	DefaultReconnectMax    = 5 * time.Second
)

// WithURL sets the coordinator's NATS URL (default $SHOCKWAVE_NATS_URL,
// else nats.DefaultURL). Several comma-separated URLs name a cluster.
func WithURL(url string) Option {
	return func(o *options) error {
		if url == "" {
			return errors.New("WithURL: empty URL")
		}
		o.url = url
		return nil
	}
}

// WithCredentials sets a per-job NATS credentials file (from `shockwave
// creds issue JOB`; default $SHOCKWAVE_CREDS). The SDK then uses the job's
// own inbox prefix, as the credentials allow no other.
func WithCredentials(file string) Option {
	return func(o *options) error {
		if file == "" {
			return errors.New("WithCredentials: empty file name")
		}
		o.creds = file
		return nil
	}
}

// WithToken sets the shared token of a coordinator in token mode (default
// $SHOCKWAVE_TOKEN).
func WithToken(token string) Option {
	return func(o *options) error {
		o.token = token
		return nil
	}
}

// WithTLSCA trusts the coordinator's TLS certificate signed by the CA in
// file (PEM; default $SHOCKWAVE_TLS_CA). Use a tls:// URL, or any URL of a
// server that requires TLS.
func WithTLSCA(file string) Option {
	return func(o *options) error {
		if file == "" {
			return errors.New("WithTLSCA: empty file name")
		}
		o.tlsCA = file
		return nil
	}
}

// WithTLSClientCert presents the client certificate in certFile with its
// key in keyFile (PEM; default $SHOCKWAVE_TLS_CERT and $SHOCKWAVE_TLS_KEY)
// to a NATS server that requires client certificates (the coordinator's
// --tls-ca with --tls-cert, or an external cluster with TLS verify on).
// Combine it with WithTLSCA unless the server's certificate chains to the
// system roots.
func WithTLSClientCert(certFile, keyFile string) Option {
	return func(o *options) error {
		if certFile == "" || keyFile == "" {
			return errors.New("WithTLSClientCert: the certificate and the key file are both needed")
		}
		o.tlsCert, o.tlsKey = certFile, keyFile
		return nil
	}
}

// WithNATSOptions appends options to the NATS connection (TLS, an
// in-process server in tests, …). They apply after the SDK's own.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) error {
		o.natsOpts = append(o.natsOpts, opts...)
		return nil
	}
}

// WithPrefix sets the coordinator's subject prefix (default "shockwave").
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if err := protocol.ValidatePrefix(prefix); err != nil {
			return fmt.Errorf("WithPrefix: %w", err)
		}
		o.prefix = prefix
		return nil
	}
}

// WithJobID sets the job id: one subject token of letters, digits, '-' and
// '_'. A restarted process must use the same id to resume the job. Without
// it the id is $SHOCKWAVE_JOB_ID, else derived from WithName (see JobID).
func WithJobID(id string) Option {
	return func(o *options) error {
		if err := protocol.ValidateJobID("WithJobID", id); err != nil {
			return err
		}
		o.job = id
		return nil
	}
}

// WithName sets a free-form label shown by `shockwave status`; without an
// explicit id the job id is derived from it.
func WithName(name string) Option {
	return func(o *options) error {
		if len(name) > protocol.MaxModelNameLen {
			return fmt.Errorf("WithName: longer than %d bytes", protocol.MaxModelNameLen)
		}
		o.name = name
		return nil
	}
}

// WithModel sets the model family (required), e.g. "ResNet-18":
// forecasts pool the history of jobs of one family.
func WithModel(model string) Option {
	return func(o *options) error {
		if model == "" || len(model) > protocol.MaxModelNameLen {
			return fmt.Errorf("WithModel: %q: want 1 to %d bytes", model, protocol.MaxModelNameLen)
		}
		o.model = model
		return nil
	}
}

// WithAdaptation declares how the job adapts its batch size: "static",
// "gns" or "accordion" (informational; forecasts learn from events).
func WithAdaptation(mode string) Option {
	return func(o *options) error {
		switch mode {
		case "static", "gns", "accordion":
			o.mode = mode
			return nil
		}
		return fmt.Errorf("WithAdaptation: unknown mode %q (want static, gns or accordion)", mode)
	}
}

// WithWorkers sets the gang width: GPUs the job needs in every round it
// runs (default 1).
func WithWorkers(n int) Option {
	return func(o *options) error {
		if n < 1 || n > protocol.MaxWorkers {
			return fmt.Errorf("WithWorkers: %d out of range [1, %d]", n, protocol.MaxWorkers)
		}
		o.workers = n
		return nil
	}
}

// WithBatchSize sets the initial batch size (required). A restarted job
// passes the initial size again and its current one through WithResume.
func WithBatchSize(n int) Option {
	return func(o *options) error {
		if n < 1 || n > protocol.MaxBatchSize {
			return fmt.Errorf("WithBatchSize: %d out of range [1, %d]", n, protocol.MaxBatchSize)
		}
		o.batchSize = n
		return nil
	}
}

// WithDatasetSize sets the samples per epoch (required).
func WithDatasetSize(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("WithDatasetSize: %d must be positive", n)
		}
		o.dataset = n
		return nil
	}
}

// WithEpochs sets the job's length in epochs. Exactly one of WithEpochs,
// WithSamples and WithTotalSteps is required.
func WithEpochs(n int) Option {
	return func(o *options) error {
		if n < 1 || n > protocol.MaxJobEpochs {
			return fmt.Errorf("WithEpochs: %d out of range [1, %d]", n, protocol.MaxJobEpochs)
		}
		o.epochs = n
		return nil
	}
}

// WithSamples sets the job's length in training samples.
func WithSamples(n int64) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("WithSamples: %d must be positive", n)
		}
		o.samples = n
		return nil
	}
}

// WithTotalSteps sets the job's length in iterations at the initial batch
// size.
func WithTotalSteps(n int64) Option {
	return func(o *options) error {
		if n < 1 || n > protocol.MaxSteps {
			return fmt.Errorf("WithTotalSteps: %d out of range [1, %d]", n, protocol.MaxSteps)
		}
		o.steps = n
		return nil
	}
}

// WithSchedule declares the planned batch size of every epoch (and, when
// known, each epoch's isolated duration in seconds; nil when unknown).
func WithSchedule(batchSizes []int, epochSeconds []float64) Option {
	return func(o *options) error {
		o.schedule = &protocol.Schedule{BatchSizes: append([]int(nil), batchSizes...),
			EpochSeconds: append([]float64(nil), epochSeconds...)}
		if epochSeconds == nil {
			o.schedule.EpochSeconds = nil
		}
		return nil
	}
}

// WithPriority sets the job's weight (default 1).
func WithPriority(p float64) Option {
	return func(o *options) error {
		if !(p > 0 && p <= 1e6) {
			return fmt.Errorf("WithPriority: %g out of range (0, 1e6]", p)
		}
		o.priority = p
		return nil
	}
}

// WithThroughput declares the isolated rate at the initial batch size, in
// steps per second, when known from profiling.
func WithThroughput(stepsPerSecond float64) Option {
	return func(o *options) error {
		if !(stepsPerSecond > 0 && stepsPerSecond <= protocol.MaxThroughput) {
			return fmt.Errorf("WithThroughput: %g out of range (0, %g]", stepsPerSecond, protocol.MaxThroughput)
		}
		o.throughput = stepsPerSecond
		return nil
	}
}

// WithIsolatedSeconds declares the expected run time alone on its GPUs; it
// enables the coordinator's run-time limit.
func WithIsolatedSeconds(s float64) Option {
	return func(o *options) error {
		if !(s > 0 && s <= protocol.MaxSeconds) {
			return fmt.Errorf("WithIsolatedSeconds: %g out of range", s)
		}
		o.isolated = s
		return nil
	}
}

// WithResume restores the progress a restarted process saved with its
// checkpoint (Job.Checkpoint). Without it a restarted job continues from the
// progress the coordinator recorded.
func WithResume(s Checkpoint) Option {
	return func(o *options) error {
		if s.StepsDone < 0 || s.Epoch < 0 || s.BatchSize < 0 || s.SamplesInEpoch < 0 || s.SamplesDone < 0 {
			return fmt.Errorf("WithResume: negative field in %+v", s)
		}
		o.resume = &s
		return nil
	}
}

// ExitOnSuspend selects EXIT mode, for launchers that restart processes
// (Kubernetes, Slurm): at a suspension the iterator calls OnSuspend and ends
// with ErrPreempted instead of waiting; the restarted process resumes from
// its checkpoint and registers again as the same job. $SHOCKWAVE_EXIT_MODE=1
// selects it too.
func ExitOnSuspend() Option {
	return func(o *options) error {
		o.exitMode = true
		return nil
	}
}

// WithOnSuspend sets the hook the iterator calls at a suspension.
func WithOnSuspend(h Hook) Option {
	return func(o *options) error {
		o.onSuspend = h
		return nil
	}
}

// WithOnResume sets the hook the iterator calls when a RUN lease ends a
// suspension.
func WithOnResume(h Hook) Option {
	return func(o *options) error {
		o.onResume = h
		return nil
	}
}

// WithLogger sets where the SDK logs (bad leases, reconnections); default
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("WithLogger: nil logger")
		}
		o.log = l
		return nil
	}
}

// WithEventBuffer bounds the progress events kept while the coordinator is
// unreachable (default DefaultBuffer). Past it the oldest progress samples
// are coalesced pairwise; epoch and batch-size events are never dropped.
func WithEventBuffer(n int) Option {
	return func(o *options) error {
		if n < 4 {
			return fmt.Errorf("WithEventBuffer: %d is below 4", n)
		}
		o.buffer = n
		return nil
	}
}

// WithSampleInterval sets how often the counters become a progress event
// (default a quarter round, within [10ms, 1s]).
func WithSampleInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return fmt.Errorf("WithSampleInterval: %v is below 1ms", d)
		}
		o.sampleEvery = d
		return nil
	}
}

// WithRegisterTimeout bounds how long Register retries an unreachable or
// busy coordinator (default DefaultRegisterTimeout).
func WithRegisterTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("WithRegisterTimeout: %v must be positive", d)
		}
		o.registerTimeout = d
		return nil
	}
}

// WithReconnectBackoff sets the reconnection backoff: it starts at first
// and doubles up to max, with jitter (defaults 250ms and 5s).
func WithReconnectBackoff(first, max time.Duration) Option {
	return func(o *options) error {
		if first <= 0 || max < first {
			return fmt.Errorf("WithReconnectBackoff: want 0 < first (%v) <= max (%v)", first, max)
		}
		o.reconnectWait, o.reconnectWaitMax = first, max
		return nil
	}
}

// defaults fills in the environment and built-in defaults.
func (o *options) defaults() {
	o.url = cmpOr(o.url, os.Getenv(EnvURL), nats.DefaultURL)
	o.creds = cmpOr(o.creds, os.Getenv(EnvCreds))
	o.token = cmpOr(o.token, os.Getenv(EnvToken))
	o.tlsCA = cmpOr(o.tlsCA, os.Getenv(EnvTLSCA))
	if o.tlsCert == "" && o.tlsKey == "" {
		o.tlsCert, o.tlsKey = os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey)
	}
	o.prefix = cmpOr(o.prefix, protocol.DefaultPrefix)
	if !o.exitMode && os.Getenv(EnvExit) == "1" {
		o.exitMode = true
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	if o.buffer == 0 {
		o.buffer = DefaultBuffer
	}
	if o.registerTimeout == 0 {
		o.registerTimeout = DefaultRegisterTimeout
	}
	if o.requestTimeout == 0 {
		o.requestTimeout = 5 * time.Second
	}
	if o.reconnectWait == 0 {
		o.reconnectWait, o.reconnectWaitMax = DefaultReconnectWait, DefaultReconnectMax
	}
	if o.closeFlushTimeout == 0 {
		o.closeFlushTimeout = 5 * time.Second
	}
}

// validate checks what options alone cannot, and picks the job id.
func (o *options) validate() error {
	if err := o.rankDefaults(); err != nil {
		return err
	}
	if v := os.Getenv(EnvLeaseFD); v != "" {
		fd, ino, err := parseLeaseFD(v)
		if err != nil {
			return err
		}
		o.leaseFD, o.leaseIno = fd, ino
	}
	if err := o.uplinkDefaults(); err != nil {
		return err
	}
	if o.job == "" {
		if id := os.Getenv(EnvJob); id != "" {
			if err := protocol.ValidateJobID("$"+EnvJob, id); err != nil {
				return err
			}
			o.job = id
		} else if o.job = JobID(o.name); o.job == "" {
			return errors.New("no job id: pass WithJobID, set $" + EnvJob + ", or pass WithName")
		}
	}
	switch {
	case o.model == "":
		return errors.New("no model family: pass WithModel")
	case o.batchSize == 0:
		return errors.New("no initial batch size: pass WithBatchSize")
	case o.dataset == 0:
		return errors.New("no dataset size: pass WithDatasetSize")
	}
	n := 0
	for _, set := range []bool{o.epochs > 0, o.samples > 0, o.steps > 0} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("job length: pass exactly one of WithEpochs, WithSamples and WithTotalSteps")
	}
	return nil
}

// JobID derives a job id from a free-form name: letters, digits, '-' and
// '_' are kept, runs of anything else become one '-', and the result is cut
// to protocol.MaxJobIDLen bytes. It returns "" when nothing is left. The
// same name always gives the same id, so a restarted process resumes its job.
func JobID(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range name {
		ok := r < 128 && (r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		switch {
		case ok:
			b.WriteRune(r)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	id := strings.TrimRight(b.String(), "-")
	if len(id) > protocol.MaxJobIDLen {
		id = id[:protocol.MaxJobIDLen]
	}
	return id
}

// register builds the registration message.
func (o *options) register() protocol.Register {
	r := protocol.Register{V: protocol.Version, Job: o.job, Name: o.name, Model: o.model, Mode: o.mode,
		Workers: o.workers, BatchSize: o.batchSize, DatasetSize: o.dataset, Priority: o.priority,
		Throughput: o.throughput, IsolatedSeconds: o.isolated, Schedule: o.schedule,
		Node: o.node, Visible: o.visible}
	perEpoch := ceilDiv(int64(o.dataset), int64(o.batchSize))
	switch {
	case o.steps > 0:
		r.TotalSteps = o.steps
	case o.epochs > 0:
		r.TotalSteps = int64(o.epochs) * perEpoch
	default:
		r.TotalSteps = ceilDiv(o.samples, int64(o.batchSize))
	}
	return r
}

// totalSamples is the job's length in samples (steps: at the initial size).
func (o *options) totalSamples() int64 {
	switch {
	case o.epochs > 0:
		return int64(o.epochs) * int64(o.dataset)
	case o.samples > 0:
		return o.samples
	}
	if o.steps > math.MaxInt64/int64(o.batchSize) {
		return math.MaxInt64
	}
	return o.steps * int64(o.batchSize)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

func cmpOr(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
