package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// Restart time is independent of history: a restart restores the newest
// snapshot and folds only the records after it. The log below is that of
// a 2,000-job cluster after a simulated week: its sequence stands at
// 1.2 billion records (the estimate for a week), everything
// before the snapshot compacted away, and the state is a week's worth —
// 2,000 live jobs with a run's worth of per-round measurements each and
// the table of the jobs that finished during the week — followed by one
// round of records (every job's event batch and the tick).

const (
	weekRecords   = 1_200_000_000
	weekJobs      = 2000
	weekEnded     = 33_600 // 2,000 concurrent jobs of about 10 h each, for 168 h
	weekMeasured  = 300    // rounds a live job has run (10 h of 120 s rounds)
	weekGPUs      = 1024
	weekPolicy    = "shockwave"
	weekHistoryRd = 12
)

// weekLog writes the week's log into a fresh embedded server's data
// directory and returns its configuration and the number of tail records.
func weekLog(t testing.TB) (dir string, cfg ServiceConfig, tail int, size int) {
	t.Helper()
	h := newHistory(t, weekPolicy, policy.Options{}, weekGPUs, 5)
	h.run(weekJobs, weekHistoryRd)
	inflateToAWeek(h.f.core)
	h.f.seq = weekRecords
	snap, err := h.f.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	first := len(h.records)
	h.round(weekHistoryRd) // the tail: one more round
	tailRecs := h.records[first:]

	dir = t.TempDir()
	emb, err := StartEmbedded(EmbeddedConfig{DataDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Shutdown()
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cfg = ServiceConfig{Core: historyConfig(weekGPUs), Policy: weekPolicy}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	st, err := openStorage(ctx, js, subj, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := openSnapshotStore(ctx, js, subj.Prefix, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The week's records are compacted: the log continues after the snapshot.
	if err := st.stream.Purge(ctx, jetstream.WithPurgeSequence(weekRecords+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := snaps.obj.PutBytes(ctx, snapshotName(weekRecords), snap); err != nil {
		t.Fatal(err)
	}
	for _, r := range tailRecs {
		if _, err := js.PublishMsg(ctx, &natsMsg(r).Msg); err != nil {
			t.Fatal(err)
		}
	}
	return dir, cfg, len(tailRecs), len(snap)
}

// inflateToAWeek gives a synthetic history's Core the state a week leaves:
// each live job's measurements of a 10-hour run, and the table of the jobs
// that finished during the week (ended jobs keep no measurements).
func inflateToAWeek(c *Core) {
	for _, j := range c.active {
		old := make([]policy.Measurement, weekMeasured)
		for i := range old {
			old[i] = policy.Measurement{Round: i - weekMeasured, Throughput: 5 + float64(i%7), BatchSize: j.view.BatchSize}
		}
		j.view.Measurements = append(old, j.view.Measurements...)
	}
	for i := range weekEnded {
		id := fmt.Sprintf("done-%05d", i)
		v := policy.Job{ID: id, Seq: c.nextSeq, Model: "ResNet-50", Mode: "gns", Workers: 1 + i%4, Priority: 1,
			SubmitTime: float64(i), AdmitTime: float64(i + 60), InitialBatchSize: 32, BatchSize: 64, DatasetSize: 50000,
			Throughput: 9, StepsDone: 100_000, TotalSteps: 100_000, Epoch: 90, RunTime: 36000, LastRun: i % 5000}
		c.nextSeq++
		j := &job{view: v, state: Completed, lastSeq: 900, leaseRound: i % 5000,
			ident: identity{model: "ResNet-50", mode: "gns", workers: v.Workers, batch: 32, dataset: 50000, steps: 100_000}}
		c.jobs[id] = j
		c.retire(j) // in the order they ended (retention.go)
	}
}

// restartWeek starts a service on the week's log and returns how long it
// took to serve and how many records it folded before serving.
func restartWeek(t testing.TB, dir string, cfg ServiceConfig) (time.Duration, int, *Service, func()) {
	t.Helper()
	emb, err := StartEmbedded(EmbeddedConfig{DataDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	folded := 0
	var svc *Service
	cfg.onApply = func(record, *outcome) {
		if !svc.ready.Load() {
			folded++
		}
	}
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	if svc, err = NewService(nc, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- svc.Run(ctx) }()
	for !svc.Health().OK {
		select {
		case err := <-done:
			t.Fatalf("the service stopped: %v", err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	took := time.Since(start)
	return took, folded, svc, func() {
		cancel()
		<-done
		nc.Close()
		emb.Shutdown()
	}
}

func TestRestart_AfterAWeekOf2000JobsFoldsOnlyTheTail(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a week-sized state")
	}
	dir, cfg, tail, size := weekLog(t)
	took, folded, svc, stop := restartWeek(t, dir, cfg)
	defer stop()
	// The tail, then the restarted coordinator's leader record (leader.go).
	if folded != tail+1 {
		t.Errorf("the restart folded %d records, want the %d of the tail and its leader record", folded, tail)
	}
	jobs := svc.fold.core.Jobs()
	if want := weekJobs + weekEnded; len(jobs) != want {
		t.Errorf("%d jobs after the restart, want %d", len(jobs), want)
	}
	if seq := svc.Health().LogSeq; seq != weekRecords+uint64(tail)+1 {
		t.Errorf("log position %d after the restart, want %d", seq, weekRecords+tail+1)
	}
	t.Logf("restart after a simulated week (log at %d records, %d jobs, snapshot %.1f MB, tail %d records): %v",
		weekRecords, len(jobs), float64(size)/1e6, tail, took)
}

// BenchmarkRestart_AfterAWeekOf2000Jobs measures a restart on the week's
// log: reading and restoring the snapshot, folding the tail, going live.
func BenchmarkRestart_AfterAWeekOf2000Jobs(b *testing.B) {
	dir, cfg, _, size := weekLog(b)
	b.ReportMetric(float64(size)/1e6, "snapshot-MB")
	for b.Loop() {
		_, _, _, stop := restartWeek(b, dir, cfg)
		b.StopTimer()
		stop()
		b.StartTimer()
	}
}

// natsMsg rebuilds a log record as a message to publish.
type pubMsg struct{ Msg nats.Msg }

func natsMsg(r record) *pubMsg {
	return &pubMsg{Msg: nats.Msg{Subject: r.Subject, Header: r.Header, Data: r.Data}}
}

// BenchmarkSnapshot_EncodeAWeekOf2000Jobs measures what a snapshot costs
// the loop: encoding the week's state (the writer seals and stores it).
func BenchmarkSnapshot_EncodeAWeekOf2000Jobs(b *testing.B) {
	h := newHistory(b, weekPolicy, policy.Options{}, weekGPUs, 5)
	h.run(weekJobs, weekHistoryRd)
	inflateToAWeek(h.f.core)
	var size int
	for b.Loop() {
		data, err := h.f.encodePayload()
		if err != nil {
			b.Fatal(err)
		}
		size = len(data)
	}
	b.ReportMetric(float64(size)/1e6, "MB")
}

// BenchmarkSnapshot_LoopPartOfAWeekOf2000Jobs measures what a snapshot
// holds the loop for now: capturing the week's state (foldImage); the
// "encoded" case adds the encoding of the capture, which the snapshot
// goroutine does (the policy's state, the larger part, is saved there too
// and is in neither).
func BenchmarkSnapshot_LoopPartOfAWeekOf2000Jobs(b *testing.B) {
	h := newHistory(b, weekPolicy, policy.Options{}, weekGPUs, 5)
	h.run(weekJobs, weekHistoryRd)
	inflateToAWeek(h.f.core)
	for _, encode := range []bool{false, true} {
		name := "captured"
		if encode {
			name = "encoded"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				img, _, err := h.f.capture()
				if err != nil {
					b.Fatal(err)
				}
				if encode {
					if _, _, err := img.encode(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkSnapshot_SealAWeekOf2000Jobs measures the envelope of the
// week's state: compressing and sealing it (the writer, before the put)
// and checking and inflating it (a restart or the writer's read-back),
// with the payload's and the stored size (snapenvelope.go).
func BenchmarkSnapshot_SealAWeekOf2000Jobs(b *testing.B) {
	h := newHistory(b, weekPolicy, policy.Options{}, weekGPUs, 5)
	h.run(weekJobs, weekHistoryRd)
	inflateToAWeek(h.f.core)
	payload, err := h.f.encodePayload()
	if err != nil {
		b.Fatal(err)
	}
	sealed := sealSnapshot(h.f.seq, h.f.core.NextRound(), payload)
	b.Run("seal", func(b *testing.B) {
		for b.Loop() {
			sealed = sealSnapshot(h.f.seq, h.f.core.NextRound(), payload)
		}
		b.ReportMetric(float64(len(payload))/1e6, "payload-MB")
		b.ReportMetric(float64(len(sealed))/1e6, "stored-MB")
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeStateSnapshot(sealed); err != nil {
				b.Fatal(err)
			}
		}
	})
}
