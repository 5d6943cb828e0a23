package coordinator

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// Durability (see doc.go, "Durability"): every input of Core is a message of
// one JetStream stream, the log. Jobs publish their event batches straight
// into it (the stream captures <prefix>.job.*.events); the service appends
// the registrations it accepted, the configuration and each round tick to
// <prefix>.log.*. The service applies the stream in order, with each
// message's storage timestamp as Core's clock, so a restarted coordinator
// replays the stream into a fresh Core and reaches exactly the state the old
// one had. A KV bucket holds a summary of the job table and the last plan,
// written after every round, for operators, as the log's high-water mark
// and to verify the replay; the state snapshots that bound the replay and
// the compaction of the log are in snapshot.go and recovery.go.

// Log record subjects below the prefix.
const (
	logConfig   = "log.config"
	logRegister = "log.register"
	logTick     = "log.tick"
	logPlan     = "log.plan"
)

// Headers of log records.
const (
	hdrReply = "Shockwave-Reply" // register: the requester's reply subject
	// snapshotKey is the KV key of the latest snapshot.
	snapshotKey = "snapshot"
)

// streamNames returns the log stream and the KV bucket of prefix.
func streamNames(prefix string) (stream, bucket string) {
	base := strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(prefix))
	return base + "_LOG", base + "_STATE"
}

// configRecord is the first record of a log: the Core configuration and the
// policy a replay must rebuild. A coordinator refuses to continue a log
// written with another configuration.
type configRecord struct {
	V            int     `json:"v"`
	GPUs         int     `json:"gpus"`
	RoundSeconds float64 `json:"round_seconds"`
	MaxFailed    int     `json:"max_failed_leases"`
	RuntimeLimit float64 `json:"runtime_limit_factor"`
	LeaseGrace   float64 `json:"lease_grace_seconds"`
	// LeaseRounds is Config.LeaseRounds when above 1 (absent, i.e. 1, in
	// logs of one-round leases, and in those from before it existed).
	LeaseRounds  int             `json:"lease_rounds,omitempty"`
	JobTimeout   float64         `json:"job_timeout_seconds"`
	Policy       string          `json:"policy"`
	PolicyConfig json.RawMessage `json:"policy_config,omitempty"`
	// Cluster is the static node list when it is not the flat pool of GPUs
	// (absent in logs of a flat pool); Dynamic marks membership by agents.
	Cluster *topology.Cluster `json:"cluster,omitempty"`
	Dynamic bool              `json:"dynamic,omitempty"`
	// Reallocate is policy.Options.ReallocateOnChange (Gavel-round
	// baselines only; absent, i.e. false, in logs from before it existed).
	Reallocate bool `json:"reallocate_on_change,omitempty"`
	// KeepEnded is Config.KeepEnded (absent, i.e. 0, keeps every ended
	// job: logs from before it existed).
	KeepEnded int `json:"keep_ended,omitempty"`
}

func newConfigRecord(cfg Config, pol string, opts policy.Options) (configRecord, error) {
	rec := configRecord{V: protocol.Version, GPUs: cfg.GPUs, RoundSeconds: cfg.RoundSeconds,
		MaxFailed: cfg.MaxFailedLeases, RuntimeLimit: cfg.RuntimeLimitFactor,
		LeaseGrace: cfg.LeaseGraceSeconds, JobTimeout: cfg.JobTimeoutSeconds, Policy: pol, Dynamic: cfg.Dynamic,
		Reallocate: opts.ReallocateOnChange, KeepEnded: cfg.KeepEnded}
	if cfg.LeaseRounds > 1 {
		rec.LeaseRounds = cfg.LeaseRounds
	}
	if cl := cfg.Cluster; len(cl.Nodes) > 0 && !reflect.DeepEqual(cl, topology.Flat(cfg.GPUs)) {
		rec.Cluster = &topology.Cluster{Nodes: slices.Clone(cl.Nodes)}
	}
	if opts.Config != nil {
		raw, err := json.Marshal(opts.Config)
		if err != nil {
			return rec, fmt.Errorf("coordinator: policy config: %w", err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return rec, fmt.Errorf("coordinator: policy config: %w", err)
		}
		rec.PolicyConfig = buf.Bytes()
	}
	return rec, nil
}

// core builds the Core and the policy the record describes.
func (r *configRecord) core() (*Core, error) {
	opts := policy.Options{ReallocateOnChange: r.Reallocate}
	if len(r.PolicyConfig) > 0 {
		opts.Config = r.PolicyConfig
	}
	p, err := policy.New(r.Policy, opts)
	if err != nil {
		return nil, err
	}
	cfg := Config{GPUs: r.GPUs, RoundSeconds: r.RoundSeconds, MaxFailedLeases: r.MaxFailed,
		RuntimeLimitFactor: r.RuntimeLimit, LeaseGraceSeconds: r.LeaseGrace,
		JobTimeoutSeconds: r.JobTimeout, ExpireLeases: true, Dynamic: r.Dynamic, LeaseRounds: r.leaseRounds(),
		KeepEnded: r.KeepEnded}
	if r.Cluster != nil {
		cfg.Cluster = *r.Cluster
	}
	return NewCore(cfg, p)
}

// keepEndedString names the recorded Config.KeepEnded ("all" for 0).
func (r *configRecord) keepEndedString() string {
	if r.KeepEnded == 0 {
		return "all"
	}
	return strconv.Itoa(r.KeepEnded)
}

// leaseRounds is the recorded Config.LeaseRounds.
func (r *configRecord) leaseRounds() int { return max(r.LeaseRounds, 1) }

// clusterString names the recorded cluster: its short form, "flat" for the
// flat pool, "dynamic" with agents.
func (r *configRecord) clusterString() string {
	switch {
	case r.Cluster != nil && r.Dynamic:
		return "dynamic from " + r.Cluster.String()
	case r.Cluster != nil:
		return r.Cluster.String()
	case r.Dynamic:
		return "dynamic"
	}
	return "flat"
}

func decodeConfigRecord(data []byte) (*configRecord, error) {
	var r configRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("coordinator: config record: %w", err)
	}
	if r.V != protocol.Version {
		return nil, fmt.Errorf("coordinator: config record: version %d", r.V)
	}
	return &r, nil
}

// tickRecord asks for the round boundary of round Round. A tick record for
// any other round than the Core's next one is a duplicate and is ignored.
type tickRecord struct {
	V     int    `json:"v"`
	Round int    `json:"round"`
	Epoch uint64 `json:"epoch,omitempty"` // the writer's leader epoch (leader.go)
	// Open says the round stays open until its plan record (pipeline.go).
	// A tick without it, from a log written before plan records existed,
	// is a whole round boundary, folded as it was then.
	Open bool `json:"open,omitempty"`
}

func decodeTickRecord(data []byte) (*tickRecord, error) {
	var r tickRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("coordinator: tick record: %w", err)
	}
	if r.V != protocol.Version || r.Round < 0 {
		return nil, fmt.Errorf("coordinator: tick record: version %d, round %d", r.V, r.Round)
	}
	return &r, nil
}

// planRecord closes round Round, which its tick record opened: the round's
// plan is placed and its leases issued at this point of the log (fold.go,
// pipeline.go). The plan itself is not in the record: it is a function of
// the state at the tick, so a replay computes the same one.
type planRecord struct {
	V     int    `json:"v"`
	Round int    `json:"round"`
	Epoch uint64 `json:"epoch,omitempty"` // the writer's leader epoch
}

func decodePlanRecord(data []byte) (*planRecord, error) {
	var r planRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("coordinator: plan record: %w", err)
	}
	if r.V != protocol.Version || r.Round < 0 {
		return nil, fmt.Errorf("coordinator: plan record: version %d, round %d", r.V, r.Round)
	}
	return &r, nil
}

// Snapshot is what the service stores in the KV bucket after each round:
// the job table and the plan of round Round, which the log up to stream
// sequence Seq produces. Digest is a hash of both, compared during replay.
type Snapshot struct {
	V       int             `json:"v"`
	Round   int             `json:"round"`
	Seq     uint64          `json:"seq"`
	Time    float64         `json:"time"`
	Policy  string          `json:"policy"`
	GPUs    int             `json:"gpus"`
	Digest  string          `json:"digest"`
	Jobs    []JobStatus     `json:"jobs"`
	Plan    json.RawMessage `json:"plan,omitempty"`
	Written time.Time       `json:"written"`
}

// digest hashes the job table and the last plan.
func digest(c *Core) (string, []JobStatus, json.RawMessage) {
	jobs := c.Jobs()
	d, pb := digestOf(jobs, c.LastPlan())
	return d, jobs, pb
}

// DecodeSnapshot reads a snapshot as stored in the KV bucket.
func DecodeSnapshot(data []byte) (*Snapshot, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("coordinator: snapshot: %w", err)
	}
	var s Snapshot
	if err := json.NewDecoder(io.LimitReader(zr, 1<<30)).Decode(&s); err != nil {
		return nil, fmt.Errorf("coordinator: snapshot: %w", err)
	}
	return &s, nil
}

// storage is the log stream and the snapshot bucket of one coordinator.
type storage struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	kv     jetstream.KeyValue
	name   string
	subj   protocol.Subjects
}

// openStorage creates or binds the log stream and the snapshot bucket.
func openStorage(ctx context.Context, js jetstream.JetStream, subj protocol.Subjects, cfg *ServiceConfig) (*storage, error) {
	name, bucket := streamNames(subj.Prefix)
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "shockwave coordinator log: job events, registrations, ticks",
		Subjects:    []string{subj.AllEvents(), subj.Prefix + ".log.>"},
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
		MaxMsgSize:  int32(cfg.MaxMessageBytes + 4096), // room for headers; the decoders enforce the limit
		Retention:   jetstream.LimitsPolicy,
		// The log is compacted behind snapshots (recovery.go), never by
		// age: a limit by age or size that discarded old records could
		// drop records no snapshot covers yet. LogMaxBytes, when set,
		// refuses new records instead (DiscardNew).
		MaxBytes:   cfg.LogMaxBytes,
		Discard:    jetstream.DiscardNew,
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: log stream %s: %w", name, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "shockwave coordinator snapshots",
		History:     1,
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: snapshot bucket %s: %w", bucket, err)
	}
	return &storage{js: js, stream: st, kv: kv, name: name, subj: subj}, nil
}

// lastSeq is the sequence of the newest record in the log.
func (s *storage) lastSeq(ctx context.Context) (uint64, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

// loggedConfig returns the log's first configuration record, the one the
// fold builds the Core from, or nil when the log has none yet.
func (s *storage) loggedConfig(ctx context.Context) (*configRecord, error) {
	m, err := s.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(s.subj.Prefix+"."+logConfig))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decodeConfigRecord(m.Data)
}

// snapshot returns the stored snapshot, or nil when there is none.
func (s *storage) snapshot(ctx context.Context) (*Snapshot, error) {
	e, err := s.kv.Get(ctx, snapshotKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return DecodeSnapshot(e.Value())
}

// ReadSnapshot fetches the latest snapshot of the coordinator with prefix
// from the KV bucket; it works while the coordinator is down.
func ReadSnapshot(ctx context.Context, js jetstream.JetStream, prefix string) (*Snapshot, error) {
	_, bucket := streamNames(prefix)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("coordinator: snapshot bucket %s: %w", bucket, err)
	}
	e, err := kv.Get(ctx, snapshotKey)
	if err != nil {
		return nil, fmt.Errorf("coordinator: snapshot: %w", err)
	}
	return DecodeSnapshot(e.Value())
}
