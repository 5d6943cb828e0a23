package coordinator

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// floodEvents publishes one-event batches on job's events subject as fast
// as nc takes them, until stop is set or the connection is closed for good.
func floodEvents(nc *nats.Conn, subject, job string, stop *atomic.Bool, sent *atomic.Int64) {
	data := []byte(`{"v":1,"job":"` + job + `","events":[{"v":1,"type":"progress","job":"` + job + `","seq":1,"steps_done":0,"total_steps":1000,"epoch":0,"batch_size":8}]}`)
	for !stop.Load() && !nc.IsClosed() {
		if err := nc.Publish(subject, data); err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		sent.Add(1)
	}
}

// testFloodIsDisconnected floods from flooder for up to 15 s and checks that
// the guard disconnects it and that rounds go on meanwhile.
func testFloodIsDisconnected(t *testing.T, e *env, flooder *nats.Conn) {
	t.Helper()
	eventually(t, 10*time.Second, "two rounds", func() bool { return e.svc.Health().Rounds >= 2 })
	var stop atomic.Bool
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		floodEvents(flooder, e.subj.Events("f"), "f", &stop, &sent)
	}()
	defer func() {
		stop.Store(true)
		<-done
	}()
	eventually(t, 10*time.Second, "the flood under way", func() bool { return sent.Load() > 50_000 })
	eventually(t, 5*time.Second, "the flooding connection disconnected", func() bool { return e.emb.FloodDisconnects() >= 1 })
	start := e.svc.Health().Rounds
	// 0.1 s rounds: 30 are due in 3 s; without the guard none closes while
	// the flood goes on.
	eventually(t, 15*time.Second, "rounds go on after the flooder was cut off", func() bool {
		return e.svc.Health().Rounds >= start+20
	})
	t.Logf("%d batches flooded, %d disconnections", sent.Load(), e.emb.FloodDisconnects())
}

func TestFlood_AConnectionFloodingEventsIsDisconnectedAndRoundsGoOn(t *testing.T) {
	e := newEnv(t, 1, nil)
	honest := e.client()
	if rep := register(t, honest, e.subj, newJob("f", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	// A client that does not reconnect: in none and token mode anyone may
	// connect again, and each new connection is cut off the same way.
	flooder := e.client(nats.NoReconnect())
	testFloodIsDisconnected(t, e, flooder)
	if !flooder.IsClosed() {
		t.Error("the flooding connection is still open")
	}
	if !honest.IsConnected() {
		t.Error("the honest connection was disconnected too")
	}
	publishBatch(t, honest, e.subj, "f", heartbeat(2, 0))
	eventually(t, 10*time.Second, "the honest job's next batch folded", func() bool {
		row, _ := jobRow(status(t, e.coordClient(), e.subj), "f")
		return row.LastSeq == 2
	})
}

func TestCreds_AJobFloodingItsEventsIsDisconnectedAndRevoked(t *testing.T) {
	e := newEnv(t, 1, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth, ec.DontListen, ec.Listen = AuthCreds, false, "127.0.0.1:-1"
	})
	creds, err := e.emb.Authority().IssueJob(e.subj, "f", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "f.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	flooder := e.client(nats.UserCredentials(path), nats.CustomInboxPrefix(e.subj.Inbox("f")))
	if rep := register(t, flooder, e.subj, newJob("f", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	other, _ := jobClient(t, e, "g")
	if rep := register(t, other, e.subj, newJob("g", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	testFloodIsDisconnected(t, e, flooder)
	// The credential is revoked: it connects no more.
	eventually(t, 10*time.Second, "the flooder's credential refused", func() bool {
		nc, err := nats.Connect(e.emb.ClientURL(), nats.UserCredentials(path), nats.NoReconnect())
		if err == nil {
			nc.Close()
			return false
		}
		return strings.Contains(strings.ToLower(err.Error()), "authorization")
	})
	if !other.IsConnected() {
		t.Error("another job was disconnected too")
	}
}
