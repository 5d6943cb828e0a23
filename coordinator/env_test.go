package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// testRound is the round length of service tests: short, so tests are fast,
// and long enough for a 2-core machine under the race detector.
const testRound = 0.1

// env is an embedded NATS server and a running Service.
type env struct {
	t     *testing.T
	dir   string
	emb   *Embedded
	ecfg  EmbeddedConfig
	scfg  ServiceConfig
	svc   *Service
	reg   *prometheus.Registry
	subj  protocol.Subjects
	stop  context.CancelFunc
	done  chan error
	owner *nats.Conn
}

// newEnv starts a server (in-process only unless listen is set) and a
// service with gandiva_fair on gpus GPUs.
func newEnv(t *testing.T, gpus int, tweak func(*EmbeddedConfig, *ServiceConfig)) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	e.ecfg = EmbeddedConfig{DataDir: e.dir, DontListen: true}
	e.scfg = ServiceConfig{Core: Config{GPUs: gpus, RoundSeconds: testRound}, Policy: "gandiva_fair"}
	if tweak != nil {
		tweak(&e.ecfg, &e.scfg)
	}
	e.subj = protocol.Subjects{Prefix: protocol.DefaultPrefix}
	if e.scfg.Prefix != "" {
		e.subj.Prefix = e.scfg.Prefix
	}
	e.start()
	t.Cleanup(e.close)
	return e
}

// start starts the server and the service; it waits for the replay.
func (e *env) start() {
	e.t.Helper()
	emb, err := StartEmbedded(e.ecfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.emb = emb
	e.startService()
}

func (e *env) startService() {
	e.t.Helper()
	nc, err := e.emb.Connect()
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := e.scfg
	if os.Getenv("SHOCKWAVE_TEST_LOG") != "" {
		l := zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.DebugLevel)
		cfg.Logger = &l
	}
	e.reg = prometheus.NewRegistry()
	cfg.Metrics = NewMetrics(e.reg)
	svc, err := NewService(nc, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.svc, e.stop, e.done, e.owner = svc, cancel, make(chan error, 1), nc
	go func() { e.done <- svc.Run(ctx) }()
	eventually(e.t, 10*time.Second, "the service replays its log", func() bool { return svc.Health().OK })
}

// stopService stops the service gracefully and closes its connection.
// stoppedConn stops the env's service and returns a coordinator connection
// to its server (closed when the test ends), for a service the test starts
// on the same log.
func (e *env) stoppedConn() *nats.Conn {
	e.t.Helper()
	e.stopService()
	nc, err := e.emb.Connect()
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

func (e *env) stopService() {
	if e.stop == nil {
		return
	}
	e.stop()
	if err := <-e.done; err != nil {
		e.t.Errorf("service: %v", err)
	}
	e.owner.Close()
	e.stop = nil
}

func (e *env) close() {
	e.stopService()
	if e.emb != nil {
		e.emb.Shutdown()
		e.emb = nil
	}
}

// client connects a job or a tool in-process.
func (e *env) client(opts ...nats.Option) *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(e.emb.Server)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func register(t testing.TB, nc *nats.Conn, subj protocol.Subjects, r protocol.Register) *protocol.RegisterReply {
	t.Helper()
	data, _ := json.Marshal(r)
	return registerRaw(t, nc, subj, data)
}

func registerRaw(t testing.TB, nc *nats.Conn, subj protocol.Subjects, data []byte) *protocol.RegisterReply {
	t.Helper()
	m, err := nc.Request(subj.Register(), data, 5*time.Second)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	var rep protocol.RegisterReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatalf("register reply %s: %v", m.Data, err)
	}
	return &rep
}

func status(t testing.TB, nc *nats.Conn, subj protocol.Subjects) *protocol.StatusReply {
	t.Helper()
	m, err := nc.Request(subj.Status(), nil, 5*time.Second)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	rep, err := protocol.DecodeStatusReply(m.Data, 64<<20)
	if err != nil {
		t.Fatalf("status reply: %v", err)
	}
	return rep
}

func jobRow(rep *protocol.StatusReply, job string) (protocol.JobInfo, bool) {
	for _, j := range rep.Jobs {
		if j.Job == job {
			return j, true
		}
	}
	return protocol.JobInfo{}, false
}

func newJob(id string, workers int) protocol.Register {
	return protocol.Register{V: protocol.Version, Job: id, Model: "ResNet-18", Workers: workers,
		BatchSize: 32, DatasetSize: 50000, TotalSteps: 1_000_000, Throughput: 10}
}

func publishBatch(t testing.TB, nc *nats.Conn, subj protocol.Subjects, job string, evs ...protocol.Event) {
	t.Helper()
	for i := range evs {
		evs[i].V, evs[i].Job = protocol.Version, job
	}
	data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: job, Events: evs})
	if err := nc.Publish(subj.Events(job), data); err != nil {
		t.Fatal(err)
	}
}

func heartbeat(seq uint64, done int64) protocol.Event {
	return protocol.Event{Type: protocol.EventProgress, Seq: seq, StepsDone: done, TotalSteps: 1_000_000, BatchSize: 32}
}

func progress(seq uint64, steps, done int64, elapsed float64) protocol.Event {
	return protocol.Event{Type: protocol.EventProgress, Seq: seq, Steps: steps, Elapsed: elapsed,
		StepsDone: done, TotalSteps: 1_000_000, BatchSize: 32, Throughput: 10}
}

// leaseLog collects the leases published on a subject.
type leaseLog struct {
	mu     sync.Mutex
	leases []protocol.Lease
}

func watchLeases(t testing.TB, nc *nats.Conn, subject string) *leaseLog {
	t.Helper()
	ll := &leaseLog{}
	_, err := nc.Subscribe(subject, func(m *nats.Msg) {
		l, err := protocol.DecodeLease(m.Data, 0)
		if err != nil {
			t.Errorf("bad lease %s: %v", m.Data, err)
			return
		}
		ll.mu.Lock()
		ll.leases = append(ll.leases, *l)
		ll.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ll
}

func (ll *leaseLog) all() []protocol.Lease {
	ll.mu.Lock()
	defer ll.mu.Unlock()
	return append([]protocol.Lease(nil), ll.leases...)
}

// find returns the first lease that matches.
func (ll *leaseLog) find(match func(*protocol.Lease) bool) (protocol.Lease, bool) {
	for _, l := range ll.all() {
		if match(&l) {
			return l, true
		}
	}
	return protocol.Lease{}, false
}

func (ll *leaseLog) String() string {
	var s string
	for _, l := range ll.all() {
		s += fmt.Sprintf("%s r%d %s %v ext=%v %s; ", l.Job, l.Round, l.Action, l.Workers, l.Extension, l.Reason)
	}
	return s
}

// counterValue reads one sample of a metric family from reg (0 if absent).
func counterValue(t testing.TB, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// embeddedConn starts an embedded server with cfg and a connection to it;
// both end with the test.
func embeddedConn(t testing.TB, cfg EmbeddedConfig) (*Embedded, *nats.Conn) {
	t.Helper()
	emb, err := StartEmbedded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Shutdown)
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return emb, nc
}
