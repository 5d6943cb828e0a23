package sdk_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// The uplink ($SHOCKWAVE_UPLINK_FD): a single-process job talks to its
// node agent only, over a Unix socket on descriptor 4. The test binary
// doubles as the job process (uplinkChild), started as the agent starts
// it: the lease pipe on descriptor 3, the socket on 4; the test plays the
// agent on the other ends (testAgent) and forwards to a real coordinator
// on its ordinary subjects (the agent's own subjects differ only in name).

// uplinkChild registers, prints what it talks through, then runs the
// commands of its standard input, a line of output each.
func uplinkChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	say := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	// Events only when a command asks (no sampling, no heartbeat) and no
	// confirmation but the ones Flush and Finish ask for.
	j, err := sdk.Register(ctx, sdk.WithModel("test-model"), sdk.WithBatchSize(8), sdk.WithDatasetSize(64), sdk.WithEpochs(100),
		sdk.WithLogger(quiet), sdk.WithRegisterTimeout(20*time.Second), sdk.WithSampleInterval(time.Hour))
	if err != nil {
		say("register error: %v", err)
		return 1
	}
	defer j.Close()
	say("registered uplinked=%t conn=%t relayed=%t", j.Uplinked(), j.Conn() != nil, j.Relayed())
	return childCommands(ctx, j, say)
}

// childCommands runs the commands of the child process's standard input
// on j, a line of output each (the uplink's and the job socket's children).
func childCommands(ctx context.Context, j *sdk.Job, say func(string, ...any)) int {
	var err error
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "run":
			if _, err := j.WaitRun(ctx); err != nil {
				say("run error: %v", err)
				continue
			}
			say("running")
		case "state":
			l, _ := j.Lease()
			say("state=%s round=%d epoch=%d bad=%d", j.LeaseState(), l.Round, l.Epoch, j.Stats().BadLeases)
		case "steps":
			n, _ := strconv.ParseInt(arg, 10, 64)
			j.RecordSteps(n, time.Duration(n)*10*time.Millisecond)
			say("ok")
		case "epoch":
			say("epoch %d", j.EndEpoch())
		case "hammer": // change the batch size as fast as possible for arg ms while stepping
			ms, _ := strconv.Atoi(arg)
			steps, _ := hammer(j, time.Duration(ms)*time.Millisecond)
			say("hammered steps=%d", steps)
		case "flush", "finish":
			fctx, fcancel := context.WithTimeout(ctx, 15*time.Second)
			start := time.Now()
			if cmd == "flush" {
				err = j.Flush(fctx)
			} else {
				err = j.Finish(fctx)
			}
			fcancel()
			if err != nil {
				say("%s error notdelivered=%t ms=%d: %v", cmd, errors.Is(err, sdk.ErrNotDelivered), time.Since(start).Milliseconds(), err)
				continue
			}
			say("%s ok", cmd)
		case "stats":
			st := j.Stats()
			say("connected=%t buffered=%d", st.Connected, st.Buffered)
		case "close":
			start := time.Now()
			err := j.Close()
			say("closed ms=%d err=%v", time.Since(start).Milliseconds(), err)
			return 0
		}
	}
	return 0
}

// testAgent plays the node agent on its end of a job's uplink, forwarding
// over nc to the coordinator's ordinary subjects.
type testAgent struct {
	t    testing.TB
	conn *net.UnixConn
	nc   *nats.Conn
	subj protocol.Subjects
	down atomic.Bool // its NATS is "down": events are lost, register and flush answered unavailable
	hold atomic.Bool // registrations are read and never answered
	old  atomic.Bool // no coordinator takes registrations through agents: answered no_uplink
	wmu  sync.Mutex
	mu   sync.Mutex
	got  []agentLine
	done chan struct{}
}

// agentLine is a request the agent read.
type agentLine struct {
	op        string
	seqs      []uint64 // events: the batch's sequence numbers
	forwarded bool
	at        time.Time // when the agent read it
}

// uplinkPair makes the socket pair of an uplink: the process's end (a
// file to hand down, close-on-exec here), its inode, and the agent's end.
func uplinkPair(t testing.TB) (*os.File, uint64, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	af := os.NewFile(uintptr(fds[1]), "agent end")
	c, err := net.FileConn(af)
	af.Close()
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "process end"), st.Ino, c.(*net.UnixConn)
}

// newTestAgent serves conn until it closes; it stops when the test ends.
func newTestAgent(t testing.TB, c *sdktest.Coordinator, conn *net.UnixConn) *testAgent {
	a := &testAgent{t: t, conn: conn, nc: c.JobClient(), subj: c.Subj, done: make(chan struct{})}
	go a.run()
	t.Cleanup(func() {
		conn.Close()
		<-a.done
	})
	return a
}

func (a *testAgent) run() {
	defer close(a.done)
	br := bufio.NewReaderSize(a.conn, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return
		}
		r, err := protocol.DecodeUplinkRequest(bytes.TrimSuffix(line, []byte("\n")), 0)
		if err != nil {
			a.t.Errorf("the job wrote a bad uplink line %.200q: %v", line, err)
			return
		}
		a.serve(r)
	}
}

func (a *testAgent) serve(r *protocol.UplinkRequest) {
	unavailable := &protocol.Error{Code: protocol.CodeUnavailable, Message: "the agent's NATS connection is down"}
	switch r.Op {
	case protocol.UplinkRegister:
		a.record(agentLine{op: r.Op})
		switch {
		case a.hold.Load():
		case a.old.Load():
			a.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID,
				Error: &protocol.Error{Code: protocol.CodeNoUplink, Message: "nothing answers on the node's register subject"}})
		case a.down.Load():
			a.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Error: unavailable})
		default:
			m, err := a.nc.Request(a.subj.Register(), r.Data, 5*time.Second)
			if err != nil {
				a.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Error: unavailable})
				return
			}
			a.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Data: m.Data})
		}
	case protocol.UplinkEvents:
		b, err := protocol.DecodeBatch(r.Data, protocol.DefaultMaxMessageBytes)
		if err != nil {
			a.t.Errorf("the job sent a bad batch: %v", err)
			return
		}
		l := agentLine{op: r.Op, forwarded: !a.down.Load()}
		for _, e := range b.Events {
			l.seqs = append(l.seqs, e.Seq)
		}
		a.record(l)
		if l.forwarded {
			_ = a.nc.Publish(a.subj.Events(b.Job), r.Data) // the body unchanged
		}
	case protocol.UplinkFlush:
		a.record(agentLine{op: r.Op})
		if a.down.Load() || a.nc.FlushTimeout(5*time.Second) != nil {
			a.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID, Error: unavailable})
			return
		}
		a.answer(protocol.UplinkAnswer{Op: protocol.UplinkReply, ID: r.ID})
	}
}

func (a *testAgent) record(l agentLine) {
	l.at = time.Now()
	a.mu.Lock()
	a.got = append(a.got, l)
	a.mu.Unlock()
}

func (a *testAgent) answer(ans protocol.UplinkAnswer) {
	ans.V = protocol.Version
	data, err := json.Marshal(ans)
	if err != nil {
		a.t.Error(err)
		return
	}
	a.writeRaw(append(data, '\n'))
}

// writeRaw writes bytes into the uplink as they are.
func (a *testAgent) writeRaw(b []byte) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	_, _ = a.conn.Write(b)
}

// reconnected says the agent's connection is back.
func (a *testAgent) reconnected() { a.answer(protocol.UplinkAnswer{Op: protocol.UplinkReconnected}) }

// lines returns what the agent read so far.
func (a *testAgent) lines() []agentLine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

func (a *testAgent) count(op string) int {
	n := 0
	for _, l := range a.lines() {
		if l.op == op {
			n++
		}
	}
	return n
}

// refuser is a TCP listener that counts the connections made to it and
// says nothing: a NATS URL that no job should ever dial.
func refuser(t *testing.T) (url string, accepted func() int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return "nats://" + ln.Addr().String(), n.Load
}

// uplinkProc is a job process with its lease pipe and its uplink.
type uplinkProc struct {
	*pipeProc
	agent *testAgent
	next  int // the index of the next output line
}

// startUplinkProc starts job id as a process on its agent's lease pipe and
// uplink, with a NATS URL it must never dial (refused counts the tries).
func startUplinkProc(t *testing.T, c *sdktest.Coordinator, id string) (p *uplinkProc, refused func() int64) {
	t.Helper()
	url, refused := refuser(t)
	return startUplinkProcOn(t, c, id, url, nil), refused
}

// startUplinkProcOn starts job id on its lease pipe and uplink with the
// NATS URL url; setup prepares the agent before the process starts.
func startUplinkProcOn(t *testing.T, c *sdktest.Coordinator, id, url string, setup func(*testAgent)) *uplinkProc {
	t.Helper()
	child, ino, conn := uplinkPair(t)
	agent := newTestAgent(t, c, conn)
	if setup != nil {
		setup(agent)
	}
	pp := startJobProc(t, "SDK_UPLINK_CHILD", []string{sdk.EnvURL + "=" + url, sdk.EnvJob + "=" + id,
		sdk.EnvUplinkFD + "=4:" + strconv.FormatUint(ino, 10)}, 0, child)
	return &uplinkProc{pipeProc: pp, agent: agent}
}

// TestUplink_UnderACoordinatorWithoutTheUplinkTheJobConnectsItself: an
// agent whose coordinator takes no registrations on the node's subject (a
// coordinator older than the agent) answers no_uplink; the job gives up
// the uplink, closing it, and registers, reports and flushes over a NATS
// connection of its own, still taking its leases from the pipe.
func TestUplink_UnderACoordinatorWithoutTheUplinkTheJobConnectsItself(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: 200 * time.Millisecond, JobTimeout: time.Hour})
	regs := registrations(t, c)
	p := startUplinkProcOn(t, c, "fallback", c.URL(), func(a *testAgent) { a.old.Store(true) })
	if got := p.line(t); got != "registered uplinked=false conn=true relayed=true" {
		t.Fatalf("first line %q, want registered uplinked=false conn=true relayed=true", got)
	}
	if r := regs("fallback"); len(r) != 1 || !r[0].Relayed {
		t.Fatalf("registrations over NATS %+v, want one, relayed", r)
	}
	select {
	case <-p.agent.done: // the job closed its end: the agent's reader saw end of file
	case <-time.After(5 * time.Second):
		t.Fatal("the job kept the uplink open after giving it up")
	}
	activeJob(t, c, "fallback")
	if got := p.do(t, "steps 5"); got != "ok" {
		t.Fatal(got)
	}
	if got := p.do(t, "flush"); got != "flush ok" {
		t.Fatalf("flush over the job's own connection: %s", got)
	}
	stepsAre(t, c, "fallback", 5)
	if n := p.agent.count(protocol.UplinkRegister); n != 1 {
		t.Errorf("%d registrations through the uplink, want the one answered no_uplink", n)
	}
}

// do sends a command and returns the line it printed.
func (p *uplinkProc) do(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return p.line(t)
}

// line returns the next line of output.
func (p *uplinkProc) line(t *testing.T) string {
	t.Helper()
	l := p.waitLine(t, p.next)
	p.next++
	return l
}

// msOf reads the "ms=N" of a line (-1 when it has none).
func msOf(line string) int {
	_, after, ok := strings.Cut(line, "ms=")
	if !ok {
		return -1
	}
	n, _ := strconv.Atoi(strings.Fields(after)[0])
	return n
}

// activeJob waits until the coordinator admitted job (before that it
// drops the job's events).
func activeJob(t *testing.T, c *sdktest.Coordinator, id string) {
	t.Helper()
	sdktest.Eventually(t, 10*time.Second, id+" active", func() bool {
		row, ok := c.Job(id)
		return ok && row.State == "active"
	})
}

func stepsAre(t *testing.T, c *sdktest.Coordinator, id string, steps int64) {
	t.Helper()
	sdktest.Eventually(t, 10*time.Second, fmt.Sprintf("the coordinator holds %d steps of %s", steps, id), func() bool {
		row, ok := c.Job(id)
		return ok && row.StepsDone == steps
	})
}

func TestUplink_AJobRegistersRunsReportsAndFinishesThroughItsAgentAndDialsNoNATS(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: 200 * time.Millisecond, JobTimeout: time.Hour})
	regs := registrations(t, c)
	p, refused := startUplinkProc(t, c, "uplinked")
	if got := p.line(t); got != "registered uplinked=true conn=false relayed=true" {
		t.Fatalf("first line %q, want registered uplinked=true conn=false relayed=true", got)
	}
	if r := regs("uplinked"); len(r) != 1 || !r[0].Relayed {
		t.Fatalf("the coordinator received %+v, want one registration with relayed=true", r)
	}
	activeJob(t, c, "uplinked")
	now := nowSeconds()
	p.writeLease(t, protocol.Lease{Job: "uplinked", Round: 1, Action: protocol.Run, Workers: []int{0}, Start: now, Expiry: now + 60})
	if got := p.do(t, "run"); got != "running" {
		t.Fatalf("run: %q", got)
	}
	p.do(t, "steps 5")
	if got := p.do(t, "epoch"); got != "epoch 1" {
		t.Fatalf("epoch: %q", got)
	}
	stepsAre(t, c, "uplinked", 5)
	p.do(t, "steps 3")
	if got := p.do(t, "finish"); got != "finish ok" {
		t.Fatalf("finish: %q", got)
	}
	// Finish returned once the coordinator had folded done.
	if row, ok := c.Job("uplinked"); !ok || row.State != "completed" || row.StepsDone != 8 {
		t.Errorf("after Finish: %+v, want completed with 8 steps", row)
	}
	if got := p.do(t, "close"); !strings.HasPrefix(got, "closed") || !strings.HasSuffix(got, "err=<nil>") {
		t.Errorf("close: %q", got)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job process did not exit")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d", code)
	}
	// Finish confirmed done by registering again, through the agent.
	if n := p.agent.count(protocol.UplinkRegister); n < 2 {
		t.Errorf("%d registrations through the agent, want the first and Finish's confirmation", n)
	}
	if n := p.agent.count(protocol.UplinkEvents); n < 2 {
		t.Errorf("%d event batches through the agent, want at least 2", n)
	}
	if n := refused(); n != 0 {
		t.Errorf("the job process dialled the NATS URL %d times; the uplink should carry everything", n)
	}
}

func TestUplink_AReconnectedAgentMakesTheJobRegisterAgainAndResendWhatTheCoordinatorLacks(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: 200 * time.Millisecond, JobTimeout: time.Hour})
	p, _ := startUplinkProc(t, c, "rejoined")
	if got := p.line(t); got != "registered uplinked=true conn=false relayed=true" {
		t.Fatalf("first line %q", got)
	}
	activeJob(t, c, "rejoined")
	// A batch the coordinator gets, unconfirmed (no flush asked for).
	p.do(t, "steps 3")
	p.do(t, "epoch")
	stepsAre(t, c, "rejoined", 3)
	held := p.agent.lines()
	lastHeld := held[len(held)-1].seqs
	// The agent's connection goes down: the next batch is lost.
	p.agent.down.Store(true)
	p.do(t, "steps 4")
	p.do(t, "epoch")
	sdktest.Eventually(t, 10*time.Second, "the agent lost a batch", func() bool {
		ls := p.agent.lines()
		return len(ls) > len(held) && !ls[len(ls)-1].forwarded
	})
	lost := p.agent.lines()[len(held)].seqs
	regsBefore := p.agent.count(protocol.UplinkRegister)

	// Back: nothing is sent until the agent says so (no sampling, no
	// confirmation due for 30 hours).
	p.agent.down.Store(false)
	p.agent.reconnected()
	stepsAre(t, c, "rejoined", 7)
	if n := p.agent.count(protocol.UplinkRegister); n != regsBefore+1 {
		t.Errorf("%d registrations after the reconnection, want 1", n-regsBefore)
	}
	// The re-registration's reply said what the coordinator holds: only
	// the lost batch is sent again.
	var resent []uint64
	for _, l := range p.agent.lines()[len(held)+1:] {
		if l.op == protocol.UplinkEvents {
			resent = append(resent, l.seqs...)
		}
	}
	if !slices.Equal(resent, lost) {
		t.Errorf("sent again after the reconnection: seqs %v, want the lost %v (the coordinator held up to %v)", resent, lost, lastHeld)
	}
	if row, _ := c.Job("rejoined"); row.Epoch != 2 {
		t.Errorf("the coordinator shows epoch %d, want 2", row.Epoch)
	}
}

func TestUplink_TheAgentClosingOrBreakingTheUplinkEndsItWithoutAHang(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: 200 * time.Millisecond, JobTimeout: time.Hour})

	t.Run("while the registration waits", func(t *testing.T) {
		p, _ := startUplinkProc(t, c, "unanswered")
		p.agent.hold.Store(true)
		sdktest.Eventually(t, 10*time.Second, "the registration reached the agent", func() bool {
			return p.agent.count(protocol.UplinkRegister) == 1
		})
		start := time.Now()
		p.agent.conn.Close()
		got := p.line(t)
		if !strings.HasPrefix(got, "register error:") || !strings.Contains(got, "uplink") || !strings.Contains(got, "the agent closed it") {
			t.Errorf("Register: %q, want an error saying the agent closed the uplink", got)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Register returned %v after the agent closed the uplink; it waited for its timeout", d)
		}
	})

	for _, end := range []string{"eof", "garbage"} {
		t.Run("after registration by "+end, func(t *testing.T) {
			id := "ended-" + end
			p, _ := startUplinkProc(t, c, id)
			if got := p.line(t); got != "registered uplinked=true conn=false relayed=true" {
				t.Fatalf("first line %q", got)
			}
			if got := p.do(t, "stats"); got != "connected=true buffered=0" {
				t.Fatalf("stats: %q", got)
			}
			switch end {
			case "eof":
				p.agent.conn.Close()
			case "garbage":
				p.agent.writeRaw([]byte("{\"v\":1,\"op\":\"reply\"}\n")) // no id
			}
			sdktest.Eventually(t, 10*time.Second, "the job sees the uplink down", func() bool {
				return p.do(t, "stats") == "connected=false buffered=0"
			})
			p.do(t, "steps 2")
			p.do(t, "epoch")
			got := p.do(t, "flush")
			if !strings.HasPrefix(got, "flush error notdelivered=true") || !strings.Contains(got, "uplink to the agent ended") {
				t.Errorf("flush: %q, want ErrNotDelivered naming the uplink", got)
			}
			if ms := msOf(got); ms < 0 || ms > 2000 {
				t.Errorf("Flush took %d ms on an uplink that does not come back", ms)
			}
			if got := p.do(t, "stats"); got != "connected=false buffered=1" {
				t.Errorf("stats: %q, want the epoch event kept", got)
			}
			got = p.do(t, "close")
			if ms := msOf(got); ms < 0 || ms > 2000 {
				t.Errorf("close: %q, want it within 2 s", got)
			}
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the job process did not exit")
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit code %d (a panic?)", code)
			}
		})
	}
}
