package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestEvents_EnterTheLogWithoutTheSendersIdentityAlsoAfterTheServerRestarts:
// in none, token and creds mode a job's event batches cross from the jobs'
// account into the coordinator's as a stream: the server delivers them as
// the job sent them, without the Nats-Request-Info header a service import
// builds for every message (JetStream strips it before storing, but the
// server still builds and copies it); they reach the log and the state,
// and still do after the server restarts on its data directory (the
// restored log subscribes again, after the import exists).
func TestEvents_EnterTheLogWithoutTheSendersIdentityAlsoAfterTheServerRestarts(t *testing.T) {
	for _, mode := range []AuthMode{AuthNone, AuthToken, AuthCreds} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, 1, func(ec *EmbeddedConfig, _ *ServiceConfig) {
				ec.Auth = mode
				if mode == AuthToken {
					ec.Token = "a-job-token-of-this-test-0123456789"
				}
			})
			job := func() *nats.Conn {
				switch mode {
				case AuthCreds:
					nc, _ := jobClient(t, e, "a")
					return nc
				case AuthToken:
					return e.client(nats.Token("a-job-token-of-this-test-0123456789"))
				}
				return e.client()
			}
			nc := job()
			if rep := register(t, nc, e.subj, newJob("a", 1)); rep.Error != nil {
				t.Fatal(rep.Error)
			}
			seq, done := uint64(0), int64(0)
			for pass := range 2 {
				if pass == 1 {
					e.close()
					e.start()
					nc = job()
				}
				// What the server delivers in the coordinator's account.
				admin := e.coordClient()
				sub, err := admin.SubscribeSync(e.subj.AllEvents())
				if err != nil {
					t.Fatal(err)
				}
				if err := admin.Flush(); err != nil {
					t.Fatal(err)
				}
				seq++
				done += 40
				publishBatch(t, nc, e.subj, "a", progress(seq, 40, done, 4))
				if err := nc.Flush(); err != nil {
					t.Fatal(err)
				}
				m, err := sub.NextMsg(5 * time.Second)
				if err != nil {
					t.Fatalf("pass %d: the batch did not reach the coordinator's account: %v", pass, err)
				}
				if h := m.Header.Get("Nats-Request-Info"); h != "" {
					t.Errorf("pass %d: the server stamped the batch with its sender's identity (%d bytes): %s", pass, len(h), h)
				}
				eventually(t, 10*time.Second, "the batch applied", func() bool {
					row, ok := jobRow(status(t, admin, e.subj), "a")
					return ok && row.StepsDone == done
				})
				found := 0
				for _, m := range logRecords(t, e) {
					if m.Subject != e.subj.Events("a") {
						continue
					}
					found++
					if h := m.Header.Get("Nats-Request-Info"); h != "" {
						t.Errorf("pass %d: an event record carries the sender's identity (%d bytes): %s", pass, len(h), h)
					}
					if !bytes.Contains(m.Data, []byte(`"steps_done":`)) {
						t.Errorf("pass %d: an event record holds %q", pass, m.Data)
					}
				}
				if found != pass+1 {
					t.Errorf("pass %d: %d event records in the log, want %d", pass, found, pass+1)
				}
			}
		})
	}
}

// BenchmarkEvents_IntoTheLog: a job's connection (the jobs' account)
// publishes one-event batches, as the SDK sends them, into the log of the
// embedded server, flushing every 256 and waiting every 8,192 until the
// log stored them (the stream drops what arrives while 100,000 messages
// wait to be stored: nats-server's ingest queue limit). It reports the
// process's CPU a batch (the server's work and the client's) besides the
// wall time and the allocations.
func BenchmarkEvents_IntoTheLog(b *testing.B) {
	emb, coord := embeddedConn(b, EmbeddedConfig{DataDir: b.TempDir(), DontListen: true})
	js, err := jetstream.New(coord)
	if err != nil {
		b.Fatal(err)
	}
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := ServiceConfig{MaxMessageBytes: 64 << 10}
	st, err := openStorage(ctx, js, subj, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	job, err := nats.Connect("", nats.InProcessServer(emb.Server))
	if err != nil {
		b.Fatal(err)
	}
	defer job.Close()
	ev := progress(1, 40, 40, 4)
	ev.V, ev.Job = protocol.Version, "job-00001"
	data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: "job-00001", Events: []protocol.Event{ev}})
	on := subj.Events("job-00001")
	stored := func() uint64 {
		info, err := st.stream.Info(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return info.State.Msgs
	}
	base := stored()
	cpu := cpuTime(b)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := job.Publish(on, data); err != nil {
			b.Fatal(err)
		}
		if n++; n%256 == 0 {
			if err := job.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		if n%8192 == 0 {
			eventually(b, time.Minute, "the log stored the batches", func() bool { return stored() >= base+uint64(n) })
		}
	}
	if err := job.Flush(); err != nil {
		b.Fatal(err)
	}
	eventually(b, time.Minute, "the log stored every batch", func() bool { return stored() >= base+uint64(n) })
	b.ReportMetric(float64((cpuTime(b)-cpu).Nanoseconds())/float64(n), "cpu-ns/op")
}
