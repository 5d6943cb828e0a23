package coordinator

import (
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
	honestJobGoesOn(t, e, honest)
}

// honestJobGoesOn checks that job f's honest connection, from the
// flooder's address, is still connected and its next batch is folded.
func honestJobGoesOn(t *testing.T, e *env, honest *nats.Conn) {
	t.Helper()
	if !honest.IsConnected() {
		t.Fatal("the honest connection was disconnected too")
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
	path := jobCredsFile(t, e, "f")
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

func TestTokenMode_AFloodingClientsAddressIsRefusedNewConnectionsForACooldown(t *testing.T) {
	e := newEnv(t, 1, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth, ec.Token, ec.DontListen, ec.Listen = AuthToken, "job-token", false, "127.0.0.1:-1"
	})
	honest, err := nats.Connect(e.emb.ClientURL(), nats.Token("job-token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(honest.Close)
	if rep := register(t, honest, e.subj, newJob("f", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	// The flooder reconnects as fast as it can.
	flooder, err := nats.Connect(e.emb.ClientURL(), nats.Token("job-token"), nats.ReconnectWait(10*time.Millisecond),
		nats.MaxReconnects(-1), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(flooder.Close)
	testFloodIsDisconnected(t, e, flooder)
	if n := e.emb.FloodDisconnects(); n != 1 {
		t.Errorf("%d disconnections: the flooder's reconnections should have been refused", n)
	}
	if flooder.IsConnected() {
		t.Error("the flooder is connected again within its cooldown")
	}
	if nc, err := nats.Connect(e.emb.ClientURL(), nats.Token("job-token"), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Error("a new connection from the flooder's address was let in within the cooldown")
	}
	// The address's connections that did not flood stay.
	honestJobGoesOn(t, e, honest)
}

func TestFloodGuard_CooldownsDoubleAndAreForgotten(t *testing.T) {
	var g floodGuard
	t0 := time.Unix(1_000_000, 0)
	if d := g.ban("10.0.0.1", t0); d != floodCooldown {
		t.Fatalf("first cooldown %v", d)
	}
	if !g.refused("10.0.0.1", t0.Add(floodCooldown-time.Millisecond)) || g.refused("10.0.0.1", t0.Add(floodCooldown)) {
		t.Error("the first cooldown does not end when it should")
	}
	if g.refused("10.0.0.2", t0) || g.refused("", t0) {
		t.Error("another address is refused")
	}
	if d := g.ban("10.0.0.1", t0.Add(time.Minute)); d != 2*floodCooldown {
		t.Errorf("second cooldown %v, want %v", d, 2*floodCooldown)
	}
	for range 20 {
		g.ban("10.0.0.1", t0.Add(2*time.Minute))
	}
	if d := g.ban("10.0.0.1", t0.Add(2*time.Minute)); d != floodCooldownMax {
		t.Errorf("cooldown after many floods %v, want the cap %v", d, floodCooldownMax)
	}
	later := t0.Add(2*time.Minute + floodMemory + time.Second)
	if d := g.ban("10.0.0.1", later); d != floodCooldown {
		t.Errorf("after %v quiet the cooldown is %v, want a fresh %v", floodMemory, d, floodCooldown)
	}
	var none *floodGuard
	if none.refused("10.0.0.1", t0) {
		t.Error("no guard refuses")
	}
}

// BenchmarkFloodGuard_Check is one reading of the guard over n job
// connections (go test ./coordinator -run XXX -bench FloodGuard).
func BenchmarkFloodGuard_Check(b *testing.B) {
	const n = 2500
	emb, _ := embeddedConn(b, EmbeddedConfig{DataDir: b.TempDir(), Listen: "127.0.0.1:-1", FloodLimit: -1})
	for range n {
		nc, err := nats.Connect(emb.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
	}
	g := floodGuard{limit: DefaultFloodLimit}
	now := time.Now()
	g.check(emb.Server, localJobsAccount, now)
	b.ResetTimer()
	for i := range b.N {
		if s := g.check(emb.Server, localJobsAccount, now.Add(time.Duration(i+1)*time.Second)); len(s) != 0 {
			b.Fatalf("%d suspects among idle connections", len(s))
		}
	}
	b.ReportMetric(float64(len(g.last)), "conns")
}

func TestCreds_AJobSplittingAFloodOverConnectionsUnderTheLimitIsCutOff(t *testing.T) {
	e := newEnv(t, 1, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth, ec.DontListen, ec.Listen = AuthCreds, false, "127.0.0.1:-1"
	})
	path := jobCredsFile(t, e, "f")
	const conns, perMs = 8, 8 // at most 8,000 a second each, under the limit; up to 64,000 together
	ncs := make([]*nats.Conn, conns)
	for i := range ncs {
		ncs[i] = e.client(nats.UserCredentials(path), nats.CustomInboxPrefix(e.subj.Inbox("f")), nats.NoReconnect(),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	}
	if rep := register(t, ncs[0], e.subj, newJob("f", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	eventually(t, 10*time.Second, "two rounds", func() bool { return e.svc.Health().Rounds >= 2 })
	data := []byte(`{"v":1,"job":"f","events":[{"v":1,"type":"progress","job":"f","seq":1,"steps_done":0,"total_steps":1000,"epoch":0,"batch_size":8}]}`)
	var stop atomic.Bool
	defer stop.Store(true)
	for _, nc := range ncs {
		go func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for !stop.Load() && !nc.IsClosed() {
				<-tick.C
				for range perMs {
					_ = nc.Publish(e.subj.Events("f"), data)
				}
			}
		}()
	}
	eventually(t, 15*time.Second, "every connection of the credential closed", func() bool {
		for _, nc := range ncs {
			if !nc.IsClosed() {
				return false
			}
		}
		return true
	})
	eventually(t, 10*time.Second, "the credential refused", func() bool {
		nc, err := nats.Connect(e.emb.ClientURL(), nats.UserCredentials(path), nats.NoReconnect())
		if err == nil {
			nc.Close()
			return false
		}
		return strings.Contains(err.Error(), "Authorization Violation")
	})
	t.Logf("%d disconnections by the guard", e.emb.FloodDisconnects())
	if e.emb.FloodDisconnects() == 0 {
		t.Error("the guard disconnected nothing")
	}
}

func TestFlood_AConnectionSendingFewButHugeMessagesIsDisconnected(t *testing.T) {
	e := newEnv(t, 1, nil)
	flooder := e.client(nats.NoReconnect(), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if rep := register(t, flooder, e.subj, newJob("f", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	eventually(t, 10*time.Second, "two rounds", func() bool { return e.svc.Health().Rounds >= 2 })
	// 200 KiB batches, at most one a millisecond: far under the message
	// limit, far over the byte limit (10 MiB a second by default).
	big := []byte(`{"v":1,"job":"f","events":[{"v":1,"type":"progress","job":"f","seq":1,"steps_done":0,"total_steps":1000,"epoch":0,"batch_size":8,"pad":"` +
		strings.Repeat("x", 200<<10) + `"}]}`)
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for !stop.Load() && !flooder.IsClosed() {
			<-tick.C
			_ = flooder.Publish(e.subj.Events("f"), big)
		}
	}()
	eventually(t, 10*time.Second, "the connection disconnected", func() bool { return flooder.IsClosed() })
	if e.emb.FloodDisconnects() != 1 {
		t.Errorf("%d disconnections", e.emb.FloodDisconnects())
	}
}
