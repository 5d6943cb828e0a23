package sdk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
	"github.com/shockwave-sched/shockwave/topology"
)

// The agent's job socket ($SHOCKWAVE_AGENT_SOCKET): a resident job that
// its agent did not start dials the agent's Unix socket, says hello, and
// then talks the uplink, leases included. The test binary doubles as the
// job process (jobSocketChild, with no lease pipe and no uplink
// descriptor); the test plays the agent on a real listener (socketAgent),
// forwarding to a real coordinator on its ordinary subjects and relaying
// the leases the coordinator publishes for the job as lease lines.

// jobSocketChild registers, prints what it talks through, then runs the
// commands of its standard input, a line of output each. It logs into
// $SDK_JOBSOCKET_LOG.
func jobSocketChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	logf, err := os.OpenFile(os.Getenv("SDK_JOBSOCKET_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		say("log error: %v", err)
		return 1
	}
	defer logf.Close()
	j, err := sdk.Register(ctx, sdk.WithModel("test-model"), sdk.WithBatchSize(8), sdk.WithDatasetSize(64), sdk.WithEpochs(100),
		sdk.WithLogger(slog.New(slog.NewTextHandler(logf, nil))), sdk.WithRegisterTimeout(20*time.Second),
		sdk.WithSampleInterval(time.Hour))
	if err != nil {
		say("register error: %v", err)
		return 1
	}
	defer j.Close()
	say("registered uplinked=%t conn=%t relayed=%t", j.Uplinked(), j.Conn() != nil, j.Relayed())
	return childCommands(ctx, j, say)
}

// socketAgent plays a node agent's job socket.
type socketAgent struct {
	t    testing.TB
	path string
	ln   *net.UnixListener
	c    *sdktest.Coordinator
	nc   *nats.Conn // forwards with a job's rights
	leas *nats.Conn // subscribes to the jobs' lease subjects
	node string

	mu     sync.Mutex
	refuse protocol.ErrorCode // answer hellos with this error code ("silent": never)
	token  string             // the token a hello must carry ("": any)
	conns  []*socketConn
	hellos []protocol.UplinkHello
	regs   []protocol.Register
	leases int // lease lines relayed from the coordinator
	wg     sync.WaitGroup
}

type socketConn struct {
	conn *net.UnixConn
	wmu  sync.Mutex
	sub  *nats.Subscription
}

// startSocketAgent listens on a new socket as the agent of node.
func startSocketAgent(t *testing.T, c *sdktest.Coordinator, node string) *socketAgent {
	t.Helper()
	dir, err := os.MkdirTemp("", "sw") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	a := &socketAgent{t: t, path: filepath.Join(dir, "agent.sock"), c: c, nc: c.JobClient(), leas: c.Client(), node: node}
	if a.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: a.path, Net: "unix"}); err != nil {
		t.Fatal(err)
	}
	a.wg.Add(1)
	go a.accept()
	t.Cleanup(func() {
		a.ln.Close()
		a.closeConns()
		a.wg.Wait()
	})
	return a
}

func (a *socketAgent) accept() {
	defer a.wg.Done()
	for {
		conn, err := a.ln.AcceptUnix()
		if err != nil {
			return
		}
		sc := &socketConn{conn: conn}
		a.mu.Lock()
		a.conns = append(a.conns, sc)
		a.mu.Unlock()
		a.wg.Add(1)
		go a.serve(sc)
	}
}

func (a *socketAgent) serve(sc *socketConn) {
	defer a.wg.Done()
	defer func() {
		if sc.sub != nil {
			_ = sc.sub.Unsubscribe()
		}
		sc.conn.Close()
	}()
	br := bufio.NewReaderSize(sc.conn, 64<<10)
	for first := true; ; first = false {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		r, err := protocol.DecodeUplinkRequest(bytes.TrimSuffix(line, []byte("\n")), 0)
		if err != nil {
			a.t.Errorf("the job wrote a bad line %.200q: %v", line, err)
			return
		}
		if first != (r.Op == protocol.UplinkHelloOp) {
			a.t.Errorf("line %q: want hello first and only first", line)
			return
		}
		if !a.step(sc, r) {
			return
		}
	}
}

// step answers one request; false closes the socket.
func (a *socketAgent) step(sc *socketConn, r *protocol.UplinkRequest) bool {
	unavailable := &protocol.Error{Code: protocol.CodeUnavailable, Message: "the agent's NATS connection is down"}
	switch r.Op {
	case protocol.UplinkHelloOp:
		h, err := protocol.DecodeUplinkHello(r.Data)
		if err != nil {
			a.t.Errorf("a bad hello: %v", err)
			return false
		}
		a.mu.Lock()
		a.hellos = append(a.hellos, *h)
		refuse, token := a.refuse, a.token
		a.mu.Unlock()
		switch {
		case refuse == "silent":
			return true
		case refuse == "" && token != "" && h.Token != token:
			refuse = protocol.CodeForbidden
		}
		if refuse != "" {
			sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Error: &protocol.Error{Code: refuse, Message: "refused by the test"}})
			return false
		}
		w, _ := json.Marshal(protocol.UplinkWelcome{V: protocol.Version, Node: a.node})
		sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Data: w})
	case protocol.UplinkRegister:
		var reg protocol.Register
		if err := json.Unmarshal(r.Data, &reg); err != nil {
			a.t.Errorf("a bad register: %v", err)
			return false
		}
		a.mu.Lock()
		a.regs = append(a.regs, reg)
		a.mu.Unlock()
		if sc.sub == nil { // subscribe before the coordinator knows the job
			sc.sub, _ = a.leas.Subscribe(a.c.Subj.Lease(reg.Job), func(m *nats.Msg) {
				a.mu.Lock()
				a.leases++
				a.mu.Unlock()
				sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkLease, Data: m.Data})
			})
			_ = a.leas.Flush()
		}
		m, err := a.nc.Request(a.c.Subj.Register(), r.Data, 5*time.Second)
		if err != nil {
			sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Error: unavailable})
			return true
		}
		sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Data: m.Data})
	case protocol.UplinkEvents:
		b, err := protocol.DecodeBatch(r.Data, protocol.DefaultMaxMessageBytes)
		if err != nil {
			a.t.Errorf("the job sent a bad batch: %v", err)
			return false
		}
		_ = a.nc.Publish(a.c.Subj.Events(b.Job), r.Data)
	case protocol.UplinkFlush:
		if a.nc.FlushTimeout(5*time.Second) != nil {
			sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Error: unavailable})
			return true
		}
		sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID})
	}
	return true
}

func (sc *socketConn) answer(ans protocol.UplinkAnswer) {
	ans.V = protocol.Version
	data, _ := json.Marshal(ans)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	_, _ = sc.conn.Write(append(data, '\n'))
}

// writeLease writes a lease line into every open socket.
func (a *socketAgent) writeLease(t *testing.T, l protocol.Lease) {
	t.Helper()
	l.V = protocol.Version
	data, err := protocol.MarshalLease(&l)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, sc := range a.conns {
		sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkLease, Data: data})
	}
}

func (a *socketAgent) closeConns() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, sc := range a.conns {
		sc.conn.Close()
	}
}

// seen returns the hellos, registrations and relayed leases so far.
func (a *socketAgent) seen() (hellos []protocol.UplinkHello, regs []protocol.Register, leases int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append(hellos, a.hellos...), append(regs, a.regs...), a.leases
}

// socketProc is a resident job process with the agent's socket named.
type socketProc struct {
	uplinkProc
	log string // its log file
}

// startSocketProc starts job id with $SHOCKWAVE_AGENT_SOCKET=path, the
// NATS URL url and the variables env; it gets no lease pipe and no uplink.
func startSocketProc(t *testing.T, id, url, path string, env ...string) *socketProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "job.log")
	env = append([]string{sdk.EnvURL + "=" + url, sdk.EnvJob + "=" + id, sdk.EnvAgentSocket + "=" + path,
		"SDK_JOBSOCKET_LOG=" + logPath, sdk.EnvLeaseFD + "=", sdk.EnvUplinkFD + "=", sdk.EnvNode + "=", sdk.EnvToken + "="}, env...)
	pp := startJobProc(t, "SDK_JOBSOCKET_CHILD", env, 0) // the pipe on 3 is named by no variable
	return &socketProc{uplinkProc: uplinkProc{pipeProc: pp}, log: logPath}
}

func (p *socketProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// exits waits for the process to end with status 0.
func (p *socketProc) exits(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job process did not exit")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d", code)
	}
}

func TestJobSocket_AResidentJobRegistersRunsReportsAndFinishesThroughItsAgentAndDialsNoNATS(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Cluster: topology.Uniform(1, 1), Round: 200 * time.Millisecond, JobTimeout: time.Hour})
	agent := startSocketAgent(t, c, "node-0")
	url, refused := refuser(t)
	p := startSocketProc(t, "resident", url, agent.path, sdk.EnvToken+"=tok-1")
	if got := p.line(t); got != "registered uplinked=true conn=false relayed=false" {
		t.Fatalf("first line %q, want registered uplinked=true conn=false relayed=false (log: %s)", got, p.logText())
	}
	hellos, regs, _ := agent.seen()
	if len(hellos) != 1 || hellos[0].Token != "tok-1" {
		t.Errorf("hellos %+v, want one carrying the job token", hellos)
	}
	if len(regs) != 1 || regs[0].Node != "node-0" || regs[0].Relayed || regs[0].Job != "resident" {
		t.Fatalf("registrations through the socket %+v, want one of job resident naming the welcome's node-0, not relayed", regs)
	}
	activeJob(t, c, "resident")
	if got := p.do(t, "run"); got != "running" {
		t.Fatalf("run: %q", got)
	}
	if _, _, n := agent.seen(); n == 0 {
		t.Error("running with no lease relayed by the agent: the RUN lease came another way")
	}
	p.do(t, "steps 5")
	if got := p.do(t, "epoch"); got != "epoch 1" {
		t.Fatalf("epoch: %q", got)
	}
	stepsAre(t, c, "resident", 5)
	p.do(t, "steps 3")
	if got := p.do(t, "finish"); got != "finish ok" {
		t.Fatalf("finish: %q", got)
	}
	if row, ok := c.Job("resident"); !ok || row.State != "completed" || row.StepsDone != 8 {
		t.Errorf("after Finish: %+v, want completed with 8 steps", row)
	}
	if got := p.do(t, "close"); !strings.HasSuffix(got, "err=<nil>") {
		t.Errorf("close: %q", got)
	}
	p.exits(t)
	if n := refused(); n != 0 {
		t.Errorf("the job process dialled the NATS URL %d times; the job socket should carry everything", n)
	}
}

func TestJobSocket_AConfiguredNodeThatIsNotTheAgentsKeepsTheJobOnNATS(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Cluster: topology.Uniform(2, 1), Round: 200 * time.Millisecond, JobTimeout: time.Hour})
	regs := registrations(t, c)
	agent := startSocketAgent(t, c, "node-1")
	p := startSocketProc(t, "elsewhere", c.URL(), agent.path, sdk.EnvNode+"=node-0")
	if got := p.line(t); got != "registered uplinked=false conn=true relayed=false" {
		t.Fatalf("first line %q, want the job on its own connection", got)
	}
	if r := regs("elsewhere"); len(r) != 1 || r[0].Node != "node-0" {
		t.Errorf("registrations %+v, want one naming the configured node-0", r)
	}
	if _, r, _ := agent.seen(); len(r) != 0 {
		t.Errorf("registrations through the socket %+v, want none", r)
	}
	if s := p.logText(); !strings.Contains(s, sdk.EnvAgentSocket) || !strings.Contains(s, `node \"node-0\"`) || !strings.Contains(s, `node \"node-1\"`) {
		t.Errorf("log %q: want the variable and both nodes named", s)
	}
	if got := p.do(t, "run"); got != "running" {
		t.Fatalf("run: %q", got)
	}
}

func TestJobSocket_AnUnusableSocketOrARefusedHelloFallsBackToNATSAndTheJobRuns(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse protocol.ErrorCode
		want   string
		path   func(a *socketAgent) string
		noRun  bool // see below
	}{
		{"forbidden", protocol.CodeForbidden, "forbidden", nil, false},
		{"no_uplink", protocol.CodeNoUplink, "takes no resident jobs", nil, false},
		// The job registers after the hello's timeout; the test
		// coordinator, idle that long, gives a job that comes so late no
		// lease (as a plain NATS job: outside this test's subject).
		{"unanswered", "silent", "did not answer the hello within", nil, true},
		{"missing", "", "no such file", func(a *socketAgent) string { return a.path + ".missing" }, false},
		{"regular file", "", "is not a socket (a regular file)", func(a *socketAgent) string {
			f := a.path + ".file"
			if err := os.WriteFile(f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sdktest.Start(t, sdktest.Config{Round: 200 * time.Millisecond, JobTimeout: time.Hour})
			agent := startSocketAgent(t, c, "node-0")
			agent.mu.Lock()
			agent.refuse = tc.refuse
			agent.mu.Unlock()
			path := agent.path
			if tc.path != nil {
				path = tc.path(agent)
			}
			id := "fallback-" + strings.ReplaceAll(tc.name, " ", "-")
			p := startSocketProc(t, id, c.URL(), path)
			if got := p.line(t); got != "registered uplinked=false conn=true relayed=false" {
				t.Fatalf("first line %q, want the job on its own connection", got)
			}
			if s := p.logText(); !strings.Contains(s, sdk.EnvAgentSocket) || !strings.Contains(s, tc.want) {
				t.Errorf("log %q: want the variable and %q named", s, tc.want)
			}
			if _, r, _ := agent.seen(); len(r) != 0 {
				t.Errorf("registrations through the socket %+v, want none", r)
			}
			if _, ok := c.Job(id); !ok {
				t.Fatal("the coordinator does not know the job")
			}
			if !tc.noRun {
				if got := p.do(t, "run"); got != "running" {
					t.Fatalf("run: %q", got)
				}
			}
			if got := p.do(t, "finish"); got != "finish ok" {
				t.Fatalf("finish: %q", got)
			}
		})
	}
}

func TestJobSocket_LeaseLinesAreCheckedAsLeasesFromNATS(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Cluster: topology.Uniform(1, 1), Round: time.Hour}) // no lease of its own
	agent := startSocketAgent(t, c, "node-0")
	url, _ := refuser(t)
	p := startSocketProc(t, "fenced", url, agent.path)
	if got := p.line(t); got != "registered uplinked=true conn=false relayed=false" {
		t.Fatalf("first line %q", got)
	}
	now := nowSeconds()
	lease := func(job string, epoch uint64, round int, action protocol.Action) protocol.Lease {
		return protocol.Lease{Job: job, Epoch: epoch, Round: round, Action: action, Workers: []int{0}, Start: now, Expiry: now + 60}
	}
	state := func(want string) {
		t.Helper()
		var got string
		sdktest.Eventually(t, 10*time.Second, "the job's state is "+want, func() bool {
			got = p.do(t, "state")
			return got == want
		})
	}
	agent.writeLease(t, lease("fenced", 3, 5, protocol.Run))
	state("state=running round=5 epoch=3 bad=0")
	// Ignored: an older leader's SUSPEND of a later round, another job's
	// SUSPEND, a line that is not a lease. The RUN after them proves they
	// were read first.
	agent.writeLease(t, lease("fenced", 2, 9, protocol.Suspend))
	agent.writeLease(t, lease("other", 3, 9, protocol.Suspend))
	agent.mu.Lock()
	for _, sc := range agent.conns {
		sc.answer(protocol.UplinkAnswer{Op: protocol.UplinkLease, Data: json.RawMessage(`{"job":"fenced"}`)})
	}
	agent.mu.Unlock()
	agent.writeLease(t, lease("fenced", 3, 6, protocol.Run))
	state("state=running round=6 epoch=3 bad=2")
	agent.writeLease(t, lease("fenced", 3, 7, protocol.Suspend))
	state("state=waiting round=7 epoch=3 bad=2")
	agent.writeLease(t, lease("fenced", 3, 8, protocol.Exit))
	state("state=ended round=8 epoch=3 bad=2")
	if got := p.do(t, "stats"); got != "connected=true buffered=0" {
		t.Errorf("stats %q: the socket should stay open across bad lease lines", got)
	}
}

func TestJobSocket_TheAgentClosingTheSocketDoesNotHangTheJob(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Cluster: topology.Uniform(1, 1), Round: time.Hour, JobTimeout: time.Hour})
	agent := startSocketAgent(t, c, "node-0")
	url, refused := refuser(t)
	p := startSocketProc(t, "abandoned", url, agent.path)
	if got := p.line(t); got != "registered uplinked=true conn=false relayed=false" {
		t.Fatalf("first line %q", got)
	}
	agent.closeConns()
	sdktest.Eventually(t, 10*time.Second, "the job sees the socket closed", func() bool {
		return strings.HasPrefix(p.do(t, "stats"), "connected=false ")
	})
	p.do(t, "steps 2")
	p.do(t, "epoch")
	got := p.do(t, "flush")
	if !strings.HasPrefix(got, "flush error notdelivered=true") || !strings.Contains(got, "uplink to the agent ended") {
		t.Errorf("flush: %q, want ErrNotDelivered naming the uplink", got)
	}
	if ms := msOf(got); ms < 0 || ms > 2000 {
		t.Errorf("Flush took %d ms on a socket that does not come back", ms)
	}
	if got := p.do(t, "close"); msOf(got) < 0 || msOf(got) > 2000 {
		t.Errorf("close: %q, want it within 2 s", got)
	}
	p.exits(t)
	if n := refused(); n != 0 {
		t.Errorf("the job dialled NATS %d times after its socket closed; it should not", n)
	}
}

func TestJobSocket_MultiProcessJobsStartedProcessesAndWithoutUplinkDoNotDialIt(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 2, Round: time.Hour})
	agent := startSocketAgent(t, c, "node-0")
	for _, tc := range []struct {
		name  string
		opts  []sdk.Option
		setup func(t *testing.T)
	}{
		{"WithoutUplink", []sdk.Option{sdk.WithoutUplink()}, nil},
		{"rank 0 of 2", []sdk.Option{sdk.WithRank(0, 2)}, nil},
		{"a lease pipe", nil, func(t *testing.T) {
			w := rawLeasePipe(t)
			t.Cleanup(func() { w.Close() })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(sdk.EnvAgentSocket, agent.path)
			if tc.setup != nil {
				tc.setup(t)
			}
			id := "kept-" + strings.ReplaceAll(tc.name, " ", "-")
			j, err := sdk.Register(context.Background(), append(append(baseOptions(c, id), sdk.WithEpochs(10)), tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if j.Uplinked() || j.Conn() == nil {
				t.Errorf("uplinked=%t conn=%v: want the job on its own NATS connection", j.Uplinked(), j.Conn())
			}
		})
	}
	if h, _, _ := agent.seen(); len(h) != 0 {
		t.Errorf("%d hellos; none of these jobs should dial the socket", len(h))
	}
}

func TestJobSocket_AMalformedSettingIsAnErrorNamingIt(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	long := "/" + strings.Repeat("x", 120)
	for _, tc := range []struct {
		name, env, want string
		opts            []sdk.Option
	}{
		{"an empty WithAgentSocket", "", "WithAgentSocket: empty path", []sdk.Option{sdk.WithAgentSocket("")}},
		{"an over-long variable", long, "$" + sdk.EnvAgentSocket, nil},
		{"an over-long WithAgentSocket", "", "WithAgentSocket", []sdk.Option{sdk.WithAgentSocket(long)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(sdk.EnvAgentSocket, tc.env)
			j, err := sdk.Register(context.Background(), append(append(baseOptions(c, "malformed"), sdk.WithEpochs(10)), tc.opts...)...)
			if err == nil {
				j.Close()
				t.Fatal("registered")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
	if _, ok := c.Job("malformed"); ok {
		t.Error("a refused job reached the coordinator")
	}
}
