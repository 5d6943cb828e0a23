package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// jsEnv is an agent of node n0 serving a job socket, a fake coordinator
// and their server; the test plays the resident process.
type jsEnv struct {
	a    *Agent
	c    *fakeCoord
	srv  *server.Server
	path string
	logs *syncBuffer
	stop func() // stops the agent and checks that its goroutines ended; idempotent
}

func startJobSocketAgent(t *testing.T, mod func(*Config)) *jsEnv {
	t.Helper()
	srv := natsServer(t, -1)
	e := &jsEnv{srv: srv, c: newFakeCoord(t, srv.ClientURL()), path: filepath.Join(t.TempDir(), "agent.sock")}
	e.a, e.logs, e.stop = runAgent(t, srv.ClientURL(), func(c *Config) {
		c.JobSocket = e.path
		c.jobHelloTimeout = 2 * time.Second
		if mod != nil {
			mod(c)
		}
	})
	eventually(t, 5*time.Second, "the job socket open", func() bool { return strings.Contains(e.logs.String(), "job socket open") })
	return e
}

// runAgent runs an agent of node n0 on url until stop (also at cleanup).
func runAgent(t *testing.T, url string, mod func(*Config)) (*Agent, *syncBuffer, func()) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	cfg := Config{Node: "n0", GPUs: 1, Conn: nc, URL: url, WorkDir: t.TempDir(), Heartbeat: 200 * time.Millisecond, Logger: &log}
	mod(&cfg)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop := func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("the agent's Run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the agent did not stop")
		}
		assertNoJobSocketGoroutines(t, a)
		nc.Close()
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(logs.String(), 4000))
		}
	}
	t.Cleanup(stop)
	return a, logs, stop
}

// assertNoJobSocketGoroutines waits until neither an uplink's goroutine
// nor the socket's accept loop runs.
func assertNoJobSocketGoroutines(t *testing.T, a *Agent) {
	t.Helper()
	assertNoUplinkGoroutines(t, a, 10*time.Second)
	eventually(t, 10*time.Second, "the job socket's accept loop ends", func() bool {
		buf := make([]byte, 4<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "agent.(*jobSocket)")
	})
}

// wantStats waits until the agent's counts satisfy ok: some are counted
// just after the process could see their effect.
func (e *jsEnv) wantStats(t *testing.T, what string, ok func(UplinkStats) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s := e.a.UplinkStats(); !ok(s); s = e.a.UplinkStats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want %s", s, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// jsClient is the test's resident process on the socket.
type jsClient struct {
	t  *testing.T
	c  net.Conn
	sc *bufio.Scanner
}

func dialJobSocket(t *testing.T, path string) *jsClient {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	sc := bufio.NewScanner(c)
	sc.Buffer(nil, 1<<20)
	return &jsClient{t: t, c: c, sc: sc}
}

// send writes lines in one write.
func (c *jsClient) send(lines ...string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, strings.Join(lines, "\n")+"\n"); err != nil {
		c.t.Fatalf("writing %.60q: %v", lines[0], err)
	}
}

// nextLine reads the next line the agent wrote (5 s at most).
func (c *jsClient) nextLine() string {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if !c.sc.Scan() {
		c.t.Fatalf("no line from the agent: %v", c.sc.Err())
	}
	return c.sc.Text()
}

func (c *jsClient) next() *protocol.UplinkAnswer {
	c.t.Helper()
	l := c.nextLine()
	a, err := protocol.DecodeUplinkAnswer([]byte(l), 0)
	if err != nil {
		c.t.Fatalf("answer %q: %v", l, err)
	}
	return a
}

// wantClosed reads end of file: the agent closed the socket.
func (c *jsClient) wantClosed() {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if c.sc.Scan() {
		c.t.Fatalf("line %q, want the socket closed", c.sc.Text())
	}
	if err := c.sc.Err(); err != nil {
		c.t.Fatalf("%v, want end of file (the agent closes the socket)", err)
	}
}

// hello opens the connection and checks the welcome.
func (c *jsClient) hello(token string) {
	c.t.Helper()
	data, _ := json.Marshal(protocol.UplinkHello{V: protocol.Version, Token: token})
	c.send(line(protocol.UplinkHelloOp, 1, data))
	a := c.next()
	wantReply(c.t, a, 1, "")
	w, err := protocol.DecodeUplinkWelcome(a.Data)
	if err != nil || w.Node != "n0" {
		c.t.Fatalf("welcome %s (%v), want node n0", a.Data, err)
	}
}

// residentRegister is a registration of job resident on node.
func residentRegister(t *testing.T, job, node string, relayed bool) []byte {
	r := protocol.Register{V: protocol.Version, Job: job, Model: "ResNet-18", Workers: 1, BatchSize: 32, DatasetSize: 1024,
		TotalSteps: 100, Node: node, Relayed: relayed}
	data := spaced(t, r)
	if _, err := protocol.DecodeRegister(data, 0); err != nil {
		t.Fatal(err)
	}
	return data
}

// leaseSubs counts the server's subscriptions that a lease of job reaches.
func leaseSubs(t *testing.T, srv *server.Server, job string) int {
	t.Helper()
	sz, err := srv.Subsz(&server.SubszOptions{Subscriptions: true, Test: protocol.Subjects{Prefix: protocol.DefaultPrefix}.Lease(job)})
	if err != nil {
		t.Fatal(err)
	}
	return sz.Total
}

func TestJobSocket_AHelloWithoutTheTokenIsForbiddenAndTheSocketCloses(t *testing.T) {
	e := startJobSocketAgent(t, func(c *Config) { c.Token = "s3cret" })
	c := dialJobSocket(t, e.path)
	data, _ := json.Marshal(protocol.UplinkHello{V: protocol.Version, Token: "s3creT"})
	c.send(line(protocol.UplinkHelloOp, 7, data), line("register", 8, residentRegister(t, "r", "n0", false)))
	wantReply(t, c.next(), 7, protocol.CodeForbidden)
	c.wantClosed()
	dialJobSocket(t, e.path).hello("s3cret")
	e.wantStats(t, "1 unwelcome connection of 2", func(s UplinkStats) bool { return s.Unwelcome == 1 && s.SocketConns == 2 })
	if n := len(e.c.registered()); n != 0 {
		t.Fatalf("%d registers forwarded, want none", n)
	}
}

func TestJobSocket_InCredsModeAHelloIsToldToConnectItself(t *testing.T) {
	e := startJobSocketAgent(t, func(c *Config) { c.FetchCreds = true })
	c := dialJobSocket(t, e.path)
	c.send(line(protocol.UplinkHelloOp, 1, []byte(`{"v":1}`)))
	wantReply(t, c.next(), 1, protocol.CodeNoUplink)
	c.wantClosed()
}

func TestJobSocket_WithoutAHelloInTimeTheSocketCloses(t *testing.T) {
	e := startJobSocketAgent(t, func(c *Config) { c.jobHelloTimeout = 100 * time.Millisecond })
	start := time.Now()
	dialJobSocket(t, e.path).wantClosed()
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %v, want about the hello timeout of 100ms", d)
	}
	// A first line that is not a hello is answered and closes the socket.
	c := dialJobSocket(t, e.path)
	c.send(line("register", 3, residentRegister(t, "r", "n0", false)))
	wantReply(t, c.next(), 3, protocol.CodeBadRequest)
	c.wantClosed()
	// A second hello is refused; the connection stays.
	c = dialJobSocket(t, e.path)
	c.hello("")
	c.send(line(protocol.UplinkHelloOp, 2, []byte(`{"v":1}`)), line("flush", 3, nil))
	wantReply(t, c.next(), 2, protocol.CodeBadRequest)
	wantReply(t, c.next(), 3, "")
	e.wantStats(t, "2 unwelcome connections", func(s UplinkStats) bool { return s.Unwelcome == 2 })
	if n := len(e.c.registered()); n != 0 {
		t.Fatalf("%d registers forwarded, want none", n)
	}
}

func TestJobSocket_ARegisterOfAnotherNodeOrRelayedOrAnotherJobIsForbiddenAndNotForwarded(t *testing.T) {
	e := startJobSocketAgent(t, nil)
	c := dialJobSocket(t, e.path)
	c.hello("")
	c.send(line("register", 2, residentRegister(t, "r", "n1", false)),
		line("register", 3, residentRegister(t, "r", "", false)),
		line("register", 4, residentRegister(t, "r", "n0", true)))
	for id := uint64(2); id <= 4; id++ {
		wantReply(t, c.next(), id, protocol.CodeForbidden)
	}
	if n := len(e.c.registered()); n != 0 {
		t.Fatalf("%d registers forwarded, want none", n)
	}
	// The first valid register binds the socket to its job.
	c.send(line("register", 5, residentRegister(t, "r", "n0", false)))
	wantReply(t, c.next(), 5, "")
	c.send(line("register", 6, residentRegister(t, "other", "n0", false)), line("events", 0, batchData(t, "other", 1, 2)),
		line("flush", 7, nil))
	wantReply(t, c.next(), 6, protocol.CodeForbidden)
	wantReply(t, c.next(), 7, "")
	if n, p := len(e.c.registered()), len(e.c.published(t)); n != 1 || p != 0 {
		t.Fatalf("%d registers and %d batches forwarded, want the one register of job r", n, p)
	}
	if s := e.a.UplinkStats(); s.Refused != 5 || s.Registers != 1 || s.Batches != 0 {
		t.Fatalf("stats %+v, want 5 lines refused and 1 register", s)
	}
	if n := leaseSubs(t, e.srv, "other"); n != 0 {
		t.Fatalf("%d subscriptions to the leases of a job refused, want 0", n)
	}
}

// TestJobSocket_RegisterAndEventsAreForwardedOnTheNodesSubjects: a
// relaying agent forwards the register marked relayed (the process's
// register re-encoded with "relayed":true), an agent with --relay=false the
// process's bytes as they are; batches go byte for byte either way.
func TestJobSocket_RegisterAndEventsAreForwardedOnTheNodesSubjects(t *testing.T) {
	for _, relay := range []bool{true, false} {
		t.Run(fmt.Sprintf("relay=%v", relay), func(t *testing.T) {
			e := startJobSocketAgent(t, func(c *Config) { c.NoRelay = !relay })
			reg, batch := residentRegister(t, "r", "n0", false), batchData(t, "r", 1, 3)
			want := reg
			if relay {
				r, _ := protocol.DecodeRegister(reg, 0)
				r.Relayed = true
				want, _ = json.Marshal(r)
			}
			c := dialJobSocket(t, e.path)
			c.hello("")
			c.send(line("register", 2, reg))
			a := c.next()
			wantReply(t, a, 2, "")
			if want := e.c.reply(protocol.Register{Job: "r"}); !bytes.Equal(a.Data, want) {
				t.Fatalf("register answered with %s, want the coordinator's reply %s", a.Data, want)
			}
			rs := e.c.registered()
			if len(rs) != 1 || rs[0].Subject != e.c.subj.AgentRegister("n0") || !bytes.Equal(rs[0].Data, want) {
				t.Fatalf("registers forwarded: %d, want one on %s:\n%s", len(rs), e.c.subj.AgentRegister("n0"), want)
			}
			if r, err := protocol.DecodeRegister(rs[0].Data, 0); err != nil || r.Relayed != relay {
				t.Fatalf("forwarded register says relayed=%v (%v), want %v", r.Relayed, err, relay)
			}
			c.send(line("events", 0, batch), line("flush", 3, nil))
			wantReply(t, c.next(), 3, "")
			ms := e.c.published(t)
			if len(ms) != 1 || ms[0].Header.Get(protocol.HdrJob) != "r" || !bytes.Equal(ms[0].Data, batch) {
				t.Fatalf("batches published: %d, want the process's batch byte for byte with job r in %s", len(ms), protocol.HdrJob)
			}
		})
	}
}

// offerResidents publishes the node's next desired state (one round and
// one second later, of leader epoch 3) with residents as its Residents
// and no assignment.
func (e *jsEnv) offerResidents(t *testing.T, residents ...protocol.Lease) *protocol.NodeDesired {
	t.Helper()
	c := e.c
	c.mu.Lock()
	c.desired.Round++
	c.desired.Now++
	c.desired.Epoch = 3
	c.desired.Jobs, c.desired.Residents = nil, residents
	d := c.desired
	data, _ := json.Marshal(d)
	c.mu.Unlock()
	if err := c.nc.Publish(c.subj.Desired("n0"), data); err != nil {
		t.Fatal(err)
	}
	return &d
}

// residentLease is job's RUN lease of round on n0's device 0.
func residentLease(job string, round int) protocol.Lease {
	return protocol.Lease{V: protocol.Version, Job: job, Round: round, Action: protocol.Run, Workers: []int{0},
		Devices: []protocol.NodeDevices{{Node: "n0", Devices: []int{0}}}, Epoch: 3, Start: 1000, Expiry: 1000 + 30*float64(round)}
}

// wantLeaseLine reads the next line and checks it is the lease line of l.
func (c *jsClient) wantLeaseLine(l protocol.Lease) {
	c.t.Helper()
	data, _ := json.Marshal(l)
	if got, want := c.nextLine(), `{"v":1,"op":"lease","data":`+string(data)+`}`; got != want {
		c.t.Fatalf("line\n%s\nwant the lease line\n%s", got, want)
	}
}

// TestJobSocket_ResidentsLeasesOfTheDesiredStateAreRelayedAndTheirEndIsASuspend:
// with the relay on, the RUN leases a desired state lists in Residents go
// into the sockets of their jobs as lease lines (each connection only its
// own job's), a repeated lease is not written again, a job no longer
// listed gets one SUSPEND of the state's round, epoch and time, a further
// state without it nothing, and a state listing it again its RUN lease.
// The agent keeps only the newest state not applied yet, so the test waits
// for a line of each state before it sends the next: a third connection,
// of job p, hears the state that writes nothing to r and q.
func TestJobSocket_ResidentsLeasesOfTheDesiredStateAreRelayedAndTheirEndIsASuspend(t *testing.T) {
	e := startJobSocketAgent(t, nil)
	conns := map[string]*jsClient{}
	for i, job := range []string{"r", "q", "p"} {
		c := dialJobSocket(t, e.path)
		c.hello("")
		c.send(line("register", uint64(2+i), residentRegister(t, job, "n0", false)))
		wantReply(t, c.next(), uint64(2+i), "")
		conns[job] = c
	}
	r, q, p := conns["r"], conns["q"], conns["p"]
	suspend := func(job string, d *protocol.NodeDesired) protocol.Lease {
		return protocol.Lease{V: protocol.Version, Job: job, Round: d.Round, Action: protocol.Suspend, Epoch: 3,
			Start: d.Now, Expiry: d.Now, Reason: fmt.Sprintf("not granted on node n0 in round %d", d.Round)}
	}

	// r and a job with no connection on this agent are listed: r gets its
	// lease, q nothing.
	e.offerResidents(t, residentLease("other", 2), residentLease("r", 2))
	r.wantLeaseLine(residentLease("r", 2))
	// q listed, r no longer: r gets one SUSPEND, q its lease.
	d3 := e.offerResidents(t, residentLease("q", 3))
	r.wantLeaseLine(suspend("r", d3))
	q.wantLeaseLine(residentLease("q", 3))
	// The same again: nothing new for r or q (q's lease is the one it has).
	e.offerResidents(t, residentLease("q", 3), residentLease("p", 4))
	p.wantLeaseLine(residentLease("p", 4)) // the state was applied
	// r listed again, q no longer.
	d5 := e.offerResidents(t, residentLease("r", 5), residentLease("p", 4))
	r.wantLeaseLine(residentLease("r", 5)) // not a second SUSPEND first
	q.wantLeaseLine(suspend("q", d5))      // not a repeated RUN first
	for i, c := range []*jsClient{r, q, p} {
		c.send(line("flush", uint64(10+i), nil))
		wantReply(t, c.next(), uint64(10+i), "") // p: not its lease again
	}
	e.wantStats(t, "4 relayed RUN leases and 2 SUSPENDs, none from NATS", func(s UplinkStats) bool {
		return s.RelayedLeases == 4 && s.RelayedSuspends == 2 && s.Leases == 0
	})
}

// TestJobSocket_WithoutTheRelayResidentsAreNotWritten: with --relay=false
// the agent writes no lease of a desired state's Residents into the socket
// (its registers are not marked relayed, so a coordinator lists none; this
// one does anyway), while the leases on the job's subject still arrive.
// The states are handed to the socket as the agent's loop does, directly:
// nothing in the socket would tell that the loop applied them.
func TestJobSocket_WithoutTheRelayResidentsAreNotWritten(t *testing.T) {
	e := startJobSocketAgent(t, func(c *Config) { c.NoRelay = true })
	c := dialJobSocket(t, e.path)
	c.hello("")
	c.send(line("register", 2, residentRegister(t, "r", "n0", false)))
	wantReply(t, c.next(), 2, "")
	d := protocol.NodeDesired{V: protocol.Version, Node: "n0", Round: 2, Now: 1001, Epoch: 3,
		Residents: []protocol.Lease{residentLease("r", 2)}}
	e.a.jobs.relay(&d)
	d.Round, d.Now, d.Residents = 3, 1002, nil
	e.a.jobs.relay(&d)
	l := residentLease("r", 7)
	data, _ := json.Marshal(l)
	if err := e.c.nc.Publish(e.c.subj.Lease("r"), data); err != nil {
		t.Fatal(err)
	}
	c.wantLeaseLine(l)
	e.wantStats(t, "1 lease from NATS and none relayed", func(s UplinkStats) bool {
		return s.Leases == 1 && s.RelayedLeases == 0 && s.RelayedSuspends == 0
	})
}

func TestJobSocket_LeasesOfTheJobArriveAsLeaseLinesByteForByte(t *testing.T) {
	e := startJobSocketAgent(t, nil)
	c := dialJobSocket(t, e.path)
	c.hello("")
	c.send(line("register", 2, residentRegister(t, "r", "n0", false)))
	wantReply(t, c.next(), 2, "")
	lease := func(job string, round int) []byte {
		data, _ := json.Marshal(protocol.Lease{V: protocol.Version, Job: job, Round: round, Action: protocol.Run, Workers: []int{0},
			Devices: []protocol.NodeDevices{{Node: "n0", Devices: []int{0}}}, Epoch: 2, Start: 1000, Expiry: 1030, Reason: "a <b> & c"})
		if _, err := protocol.DecodeLease(data, 0); err != nil {
			t.Fatal(err)
		}
		return data
	}
	subject := e.c.subj.Lease("r")
	for _, data := range [][]byte{lease("r", 4), lease("other", 5), []byte(`{"v":1,"job":"r"`), lease("r", 6)} {
		if err := e.c.nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, round := range []int{4, 6} {
		want := `{"v":1,"op":"lease","data":` + string(lease("r", round)) + `}`
		if got := c.nextLine(); got != want {
			t.Fatalf("lease line\n%s\nwant\n%s", got, want)
		}
	}
	c.send(line("flush", 3, nil))
	wantReply(t, c.next(), 3, "") // nothing between the second lease and the flush's answer
	e.wantStats(t, "2 leases written and 2 dropped", func(s UplinkStats) bool { return s.Leases == 2 && s.LeasesDropped == 2 })
}

func TestJobSocket_ClosingTheSocketEndsItsLeaseSubscriptionAndGoroutines(t *testing.T) {
	e := startJobSocketAgent(t, nil)
	base := e.a.cfg.Conn.NumSubscriptions()
	var cs []*jsClient
	for i := range 2 { // a restarted process: two connections of one job
		c := dialJobSocket(t, e.path)
		c.hello("")
		c.send(line("register", uint64(2+i), residentRegister(t, "r", "n0", false)))
		wantReply(t, c.next(), uint64(2+i), "")
		cs = append(cs, c)
	}
	if n := leaseSubs(t, e.srv, "r"); n != 2 {
		t.Fatalf("%d subscriptions to job r's leases at the server, want one per connection", n)
	}
	with := e.a.cfg.Conn.NumSubscriptions()
	cs[0].c.Close()
	eventually(t, 5*time.Second, "one lease subscription left", func() bool { return leaseSubs(t, e.srv, "r") == 1 })
	if err := e.c.nc.Publish(e.c.subj.Lease("r"), []byte(`{"v":1,"job":"r","round":1,"action":"SUSPEND","start":1,"expiry":1}`)); err != nil {
		t.Fatal(err)
	}
	if l := cs[1].next(); l.Op != protocol.UplinkLease {
		t.Fatalf("answer %+v, want the lease on the connection still open", l)
	}
	cs[1].c.Close()
	eventually(t, 5*time.Second, "no lease subscription and no uplink goroutine left", func() bool {
		return leaseSubs(t, e.srv, "r") == 0 && e.a.jobs.hub.running.Load() == 0 && e.a.jobs.openConns() == 0
	})
	if n := e.a.cfg.Conn.NumSubscriptions(); n != with-2 || n > base+1 { // +1: the request mux of the forwarded registers
		t.Fatalf("the agent's connection holds %d subscriptions, want %d (%d with the two connections)", n, with-2, with)
	}
}

func TestJobSocket_AfterAnOutageTheConnectionHearsReconnectedAndStillGetsLeases(t *testing.T) {
	e := startJobSocketAgent(t, func(c *Config) { c.NoRelay = true }) // the socket's own hub: no uplinks
	c := dialJobSocket(t, e.path)
	c.hello("")
	c.send(line("register", 2, residentRegister(t, "r", "n0", false)))
	wantReply(t, c.next(), 2, "")
	port := e.srv.Addr().(*net.TCPAddr).Port
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	srv := natsServer(t, port)
	if a := c.next(); a.Op != protocol.UplinkReconnected {
		t.Fatalf("after the outage: %+v, want %q", a, protocol.UplinkReconnected)
	}
	c.send(line("flush", 3, nil)) // the connection was replaced: an error, so the SDK sends again
	wantReply(t, c.next(), 3, protocol.CodeUnavailable)
	eventually(t, 5*time.Second, "the lease subscription back at the server and the coordinator reconnected", func() bool {
		return leaseSubs(t, srv, "r") == 1 && e.c.nc.IsConnected()
	})
	lease := []byte(`{"v":1,"job":"r","round":9,"action":"SUSPEND","start":1,"expiry":1}`)
	if err := e.c.nc.Publish(e.c.subj.Lease("r"), lease); err != nil {
		t.Fatal(err)
	}
	if got, want := c.nextLine(), `{"v":1,"op":"lease","data":`+string(lease)+`}`; got != want {
		t.Fatalf("lease line %s, want %s", got, want)
	}
	e.wantStats(t, "one notice", func(s UplinkStats) bool { return s.Notices == 1 })
}

func TestJobSocket_ConnectionsBeyondTheLimitAreClosedAtOnce(t *testing.T) {
	e := startJobSocketAgent(t, func(c *Config) { c.jobSocketConns = 2 })
	a, b := dialJobSocket(t, e.path), dialJobSocket(t, e.path)
	a.hello("")
	b.hello("")
	dialJobSocket(t, e.path).wantClosed()
	a.c.Close()
	eventually(t, 5*time.Second, "a place freed", func() bool { return e.a.jobs.openConns() == 1 })
	dialJobSocket(t, e.path).hello("")
	e.wantStats(t, "3 connections served and 1 refused", func(s UplinkStats) bool { return s.SocketBusy == 1 && s.SocketConns == 3 })
}

func TestJobSocket_AStaleSocketIsReplaced(t *testing.T) {
	srv := natsServer(t, -1)
	newFakeCoord(t, srv.ClientURL())
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the socket file stays; nobody listens: connect is refused
	_, logs, _ := runAgent(t, srv.ClientURL(), func(c *Config) { c.JobSocket = path })
	eventually(t, 5*time.Second, "the job socket open", func() bool { return strings.Contains(logs.String(), "job socket open") })
	dialJobSocket(t, path).hello("")
}

func TestJobSocket_AnythingButAStaleSocketAtThePathIsRefused(t *testing.T) {
	e := startJobSocketAgent(t, nil)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{file, "not a socket"},
		{t.TempDir(), "not a socket"},
		{e.path, "another agent serves it"},
	} {
		nc, err := nats.Connect(e.srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(Config{Node: "n0", GPUs: 1, Conn: nc, URL: "x", WorkDir: t.TempDir(), JobSocket: c.path})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = a.Run(ctx)
		cancel()
		nc.Close()
		if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run with the job socket at %s: %v, want an error naming the path and %q", c.path, err, c.want)
		}
	}
	if st, err := os.Lstat(file); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("the regular file at the path: %v, want it left alone", err)
	}
	dialJobSocket(t, e.path).hello("") // the first agent still serves
}

func TestJobSocket_TheSocketHasItsModeAndIsRemovedWhenTheAgentStops(t *testing.T) {
	e := startJobSocketAgent(t, func(c *Config) { c.JobSocketMode = 0o660 })
	st, err := os.Lstat(e.path)
	if err != nil || st.Mode().Type() != fs.ModeSocket || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket file %v (%v), want a socket of mode 0660", st.Mode(), err)
	}
	c := dialJobSocket(t, e.path)
	c.hello("")
	e.stop()
	c.wantClosed()
	if _, err := os.Lstat(e.path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the agent stopped: %v, want the socket file removed", err)
	}
}

func TestJobSocket_BadSettingsAreRefusedByNew(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.JobSocketMode = 0o1777 }, "job socket mode"},
		{func(c *Config) { c.JobSocket = "/" + strings.Repeat("x", 120) }, "longer than"},
	} {
		cfg := Config{Node: "n0", GPUs: 1, Conn: &nats.Conn{}, URL: "x", WorkDir: "w", JobSocket: "/tmp/s"}
		c.mod(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New: %v, want an error saying %q", err, c.want)
		}
	}
}
