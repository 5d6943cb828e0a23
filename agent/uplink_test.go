package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// UplinkChild is the process the uplink tests start through the agent (the
// test binary again, run by TestMain in harness_test.go when
// $AGENT_UPLINK_CHILD is set). It prints what its descriptor 4 is. With a
// socket named by inode there, it writes the lines of the file
// $AGENT_UPLINK_SEND into it ("#sleep D" pauses, "#wait" waits for the next
// answer) and prints every answer it reads, until it read
// $AGENT_UPLINK_ANSWERS of them (0: until end of file, then "eof"; -1: it
// never reads them). With AGENT_UPLINK_CHILD=grandchild it starts a
// process that inherits the socket and outlives it, prints its pid, and
// exits.
func UplinkChild() int {
	var st syscall.Stat_t
	v, set := os.LookupEnv(protocol.EnvUplinkFD)
	switch {
	case syscall.Fstat(uplinkFD, &st) != nil:
		fmt.Printf("fd4=closed env=%v\n", set)
		return 0
	case st.Mode&syscall.S_IFMT != syscall.S_IFSOCK:
		fmt.Printf("fd4=other env=%v\n", set)
		return 0
	case v != "4:"+strconv.FormatUint(st.Ino, 10):
		fmt.Printf("fd4=socket env=%q inode=%d\n", v, st.Ino)
		return 0
	}
	fmt.Println("fd4=socket env=inode")
	if os.Getenv("AGENT_UPLINK_CHILD") == "grandchild" {
		cmd := exec.Command("sleep", "60") // inherits descriptor 4: it is not close-on-exec here
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Printf("grandchild %d\n", cmd.Process.Pid)
		return 0
	}
	f := os.NewFile(uplinkFD, "uplink")
	script, _ := os.ReadFile(os.Getenv("AGENT_UPLINK_SEND"))
	got := make(chan struct{}, 1024)
	go func() {
		for _, l := range strings.SplitAfter(string(script), "\n") {
			switch cmd := strings.TrimSpace(l); {
			case cmd == "#wait":
				<-got
			case strings.HasPrefix(cmd, "#sleep "):
				d, _ := time.ParseDuration(strings.TrimPrefix(cmd, "#sleep "))
				time.Sleep(d)
			case l != "":
				if _, err := f.WriteString(l); err != nil {
					return
				}
			}
		}
	}()
	want, _ := strconv.Atoi(os.Getenv("AGENT_UPLINK_ANSWERS"))
	if want < 0 {
		select {} // never reads: the agent's writer for this process blocks
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 0; sc.Scan(); {
		fmt.Println(sc.Text())
		got <- struct{}{}
		if n++; n == want {
			return 0
		}
	}
	fmt.Println("eof")
	return 0
}

// natsServer starts an embedded server on port (-1: any).
func natsServer(t *testing.T, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("the NATS server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// fakeCoord answers an agent in place of the coordinator: its join with a
// desired state, its heartbeats and reports, and the registrations the
// agent forwards; it collects the event batches the agent publishes.
type fakeCoord struct {
	nc      *nats.Conn
	subj    protocol.Subjects
	desired protocol.NodeDesired
	reply   func(r protocol.Register) []byte // the answer to a registration

	mu        sync.Mutex
	registers []*nats.Msg
	reports   []protocol.AgentReport
	events    chan *nats.Msg
}

func newFakeCoord(t *testing.T, url string, jobs ...protocol.Assignment) *fakeCoord {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c := &fakeCoord{nc: nc, subj: protocol.Subjects{Prefix: protocol.DefaultPrefix}, events: make(chan *nats.Msg, 100000),
		desired: protocol.NodeDesired{V: protocol.Version, Node: "n0", Round: 1, Now: 1000, Epoch: 1, Jobs: jobs}}
	c.reply = func(r protocol.Register) []byte {
		return []byte(fmt.Sprintf(`{"v":1,"job":%q,"state":"active","round":3,"last_seq":0,"steps_done":0,"epoch":0}`, r.Job))
	}
	ok, _ := json.Marshal(protocol.AgentReply{V: protocol.Version})
	subs := map[string]nats.MsgHandler{
		c.subj.AgentJoin("n0"): func(m *nats.Msg) {
			c.mu.Lock()
			data, _ := json.Marshal(protocol.AgentReply{V: protocol.Version, Desired: &c.desired})
			c.mu.Unlock()
			_ = m.Respond(data)
		},
		c.subj.AgentHeartbeat("n0"): func(m *nats.Msg) { _ = m.Respond(ok) },
		c.subj.AgentReport("n0"): func(m *nats.Msg) {
			var r protocol.AgentReport
			_ = json.Unmarshal(m.Data, &r)
			c.mu.Lock()
			c.reports = append(c.reports, r)
			c.mu.Unlock()
			_ = m.Respond(ok)
		},
		c.subj.AgentRegister("n0"): func(m *nats.Msg) {
			var r protocol.Register
			_ = json.Unmarshal(m.Data, &r)
			c.mu.Lock()
			c.registers = append(c.registers, m)
			reply := c.reply
			c.mu.Unlock()
			_ = m.Respond(reply(r))
		},
	}
	for subject, cb := range subs {
		if _, err := nc.Subscribe(subject, cb); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.ChanSubscribe(c.subj.AgentEvents("n0"), c.events); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// offer publishes a newer desired state with jobs.
func (c *fakeCoord) offer(t *testing.T, jobs ...protocol.Assignment) {
	c.mu.Lock()
	c.desired.Round++
	c.desired.Now++
	c.desired.Jobs = jobs
	data, _ := json.Marshal(c.desired)
	c.mu.Unlock()
	if err := c.nc.Publish(c.subj.Desired("n0"), data); err != nil {
		t.Fatal(err)
	}
}

func (c *fakeCoord) registered() []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*nats.Msg(nil), c.registers...)
}

func (c *fakeCoord) reported() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.reports)
}

// published returns the batches the coordinator received so far: after a
// round trip of its own connection, every one the server had delivered
// is in the channel (a channel subscription is filled by the read loop).
func (c *fakeCoord) published(t *testing.T) []*nats.Msg {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var out []*nats.Msg
	for {
		select {
		case m := <-c.events:
			out = append(out, m)
		default:
			return out
		}
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// uplinkEnv is an agent run by its loop against a fake coordinator.
type uplinkEnv struct {
	a    *Agent
	c    *fakeCoord
	logs *syncBuffer
}

// startUplinkAgent runs an agent of node n0 (4 GPUs) on url, whose join c
// answers; at the end of the test it stops the agent and checks that no
// goroutine of an uplink is left.
func startUplinkAgent(t *testing.T, c *fakeCoord, url string, mod func(*Config)) *uplinkEnv {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	cfg := Config{Node: "n0", GPUs: 4, Conn: nc, URL: url, WorkDir: t.TempDir(), Heartbeat: 200 * time.Millisecond,
		KillGrace: time.Second, Logger: &log}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("the agent did not stop")
		}
		assertNoUplinkGoroutines(t, a, 10*time.Second)
		nc.Close()
		if t.Failed() {
			t.Logf("agent log:\n%s", tail(logs.String(), 4000))
		}
	})
	return &uplinkEnv{a: a, c: c, logs: logs}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// assertNoUplinkGoroutines waits until no goroutine of an uplink runs: the
// hub's count and the stacks of all goroutines.
func assertNoUplinkGoroutines(t *testing.T, a *Agent, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 4<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		n := int64(0)
		if a.uplinks != nil {
			n = a.uplinks.running.Load()
		}
		if n == 0 && !strings.Contains(stacks, "agent.(*uplink)") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d uplink goroutines still run %v after the processes ended:\n%s", n, d, uplinkStacks(stacks))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func uplinkStacks(all string) string {
	var out []string
	for _, g := range strings.Split(all, "\n\n") {
		if strings.Contains(g, "agent.(*uplink)") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// uplinkJob is a single-process assignment of the uplink child on device
// dev that writes lines and reads answers answers.
func uplinkJob(t *testing.T, job string, dev, answers int, lines ...string) protocol.Assignment {
	t.Helper()
	script := filepath.Join(t.TempDir(), job+".send")
	text := ""
	if len(lines) > 0 {
		text = strings.Join(lines, "\n") + "\n"
	}
	if err := os.WriteFile(script, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return protocol.Assignment{Job: job, Command: []string{os.Args[0], "-test.run=XXX"},
		Env:     []string{"AGENT_UPLINK_CHILD=1", "AGENT_UPLINK_SEND=" + script, "AGENT_UPLINK_ANSWERS=" + strconv.Itoa(answers)},
		Devices: []int{dev}, Procs: 1, WorldSize: 1, Expiry: 1e6}
}

// spaced re-spaces compact JSON (", " between members), so that a test
// sees whether the agent forwards data unchanged or re-encodes it.
func spaced(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(data, []byte(`,"`), []byte(`, "`))
}

func registerData(t *testing.T, job string) []byte {
	r := protocol.Register{V: protocol.Version, Job: job, Model: "ResNet-18", Workers: 1, BatchSize: 32, DatasetSize: 1024, TotalSteps: 100}
	data := spaced(t, r)
	if _, err := protocol.DecodeRegister(data, 0); err != nil {
		t.Fatal(err)
	}
	return data
}

// batchData is a valid batch of job: n progress events from seq first.
func batchData(t *testing.T, job string, first uint64, n int) []byte {
	b := protocol.Batch{V: protocol.Version, Job: job}
	for i := range n {
		b.Events = append(b.Events, protocol.Event{V: protocol.Version, Type: protocol.EventProgress, Job: job, Seq: first + uint64(i),
			Steps: 10, Elapsed: 0.5, StepsDone: 10 * int64(i+1), TotalSteps: 1000000, BatchSize: 32})
	}
	data := spaced(t, b)
	if _, err := protocol.DecodeBatch(data, 0); err != nil {
		t.Fatal(err)
	}
	return data
}

// line is one uplink request line.
func line(op string, id uint64, data []byte) string {
	s := fmt.Sprintf(`{"v":1,"op":%q`, op)
	if id != 0 {
		s += fmt.Sprintf(`,"id":%d`, id)
	}
	if data != nil {
		s += `,"data":` + string(data)
	}
	return s + "}"
}

// answers decodes the answer lines of a child's output (after its fd4
// line).
func answers(t *testing.T, out []string) []*protocol.UplinkAnswer {
	t.Helper()
	var as []*protocol.UplinkAnswer
	for _, l := range out[1:] {
		if l == "eof" {
			break
		}
		a, err := protocol.DecodeUplinkAnswer([]byte(l), 0)
		if err != nil {
			t.Fatalf("answer %q: %v", l, err)
		}
		as = append(as, a)
	}
	return as
}

func wantReply(t *testing.T, a *protocol.UplinkAnswer, id uint64, code protocol.ErrorCode) {
	t.Helper()
	switch {
	case a.Op != protocol.UplinkReply || a.ID != id:
		t.Fatalf("answer %+v, want the reply to %d", a, id)
	case code == "" && a.Error != nil:
		t.Fatalf("reply to %d: error %v", id, a.Error)
	case code != "" && (a.Error == nil || a.Error.Code != code):
		t.Fatalf("reply to %d: %+v, want error %s", id, a, code)
	}
}

func TestUplink_RegisterAndEventsAreForwardedOnTheNodesSubjects(t *testing.T) {
	srv := natsServer(t, -1)
	reg, batch := registerData(t, "j"), batchData(t, "j", 1, 3)
	url := srv.ClientURL()
	e := startUplinkAgent(t, newFakeCoord(t, url,
		uplinkJob(t, "j", 0, 2, line("register", 1, reg), line("events", 0, batch), line("flush", 2, nil))), url, nil)
	out := waitOutput(t, e.a, "j", 3)
	if out[0] != "fd4=socket env=inode" {
		t.Fatalf("the process saw %q, want a socket on descriptor 4 named by its inode in %s", out[0], protocol.EnvUplinkFD)
	}
	as := answers(t, out)
	wantReply(t, as[0], 1, "")
	if want := e.c.reply(protocol.Register{Job: "j"}); !bytes.Equal(as[0].Data, want) {
		t.Fatalf("register answered with %s, want the coordinator's reply %s", as[0].Data, want)
	}
	wantReply(t, as[1], 2, "")
	if len(as[1].Data) != 0 {
		t.Fatalf("a flush answered with data %s", as[1].Data)
	}
	regs := e.c.registered()
	if len(regs) != 1 || regs[0].Subject != "shockwave.agent.n0.register" || !bytes.Equal(regs[0].Data, reg) {
		t.Fatalf("registrations %v, want one on shockwave.agent.n0.register with the body unchanged", regs)
	}
	evs := e.c.published(t)
	if len(evs) != 1 {
		t.Fatalf("%d batches published before the flush was answered, want 1", len(evs))
	}
	m := evs[0]
	if m.Subject != "shockwave.agent.n0.events" || m.Header.Get(protocol.HdrJob) != "j" || !bytes.Equal(m.Data, batch) {
		t.Fatalf("batch on %s, header %v, body %s; want shockwave.agent.n0.events, %s: j, %s", m.Subject, m.Header, m.Data, protocol.HdrJob, batch)
	}
	if s := e.a.UplinkStats(); s.Registers != 1 || s.Batches != 1 || s.Flushes != 1 || s.Refused+s.Malformed+s.OverRate+s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestUplink_LinesNamingAnotherJobAreRefusedAndNothingIsForwarded(t *testing.T) {
	srv := natsServer(t, -1)
	var resident protocol.Register
	_ = json.Unmarshal(registerData(t, "j"), &resident)
	resident.Node = "n1"
	residentData, _ := json.Marshal(resident)
	url := srv.ClientURL()
	e := startUplinkAgent(t, newFakeCoord(t, url, uplinkJob(t, "j", 0, 3,
		line("register", 1, registerData(t, "other")),
		line("events", 0, batchData(t, "other", 1, 2)),
		line("register", 2, residentData),
		line("flush", 3, nil))), url, nil)
	as := answers(t, waitOutput(t, e.a, "j", 4))
	wantReply(t, as[0], 1, protocol.CodeForbidden)
	if !strings.Contains(as[0].Error.Message, `"other"`) {
		t.Errorf("refusal %q does not name the job", as[0].Error.Message)
	}
	wantReply(t, as[1], 2, protocol.CodeForbidden)
	wantReply(t, as[2], 3, "")
	if regs, evs := e.c.registered(), e.c.published(t); len(regs)+len(evs) != 0 {
		t.Fatalf("forwarded %d registrations and %d batches of lines naming another job or a node", len(regs), len(evs))
	}
	if s := e.a.UplinkStats(); s.Refused != 3 || s.Registers+s.Batches != 0 {
		t.Fatalf("stats %+v, want 3 refused, nothing forwarded", s)
	}
}

// pausingProxy forwards TCP connections to upstream; while paused, the
// bytes from its clients are held back.
func pausingProxy(t *testing.T, upstream string) (url string, pause func(bool)) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	paused := false
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		paused = false
		cond.Broadcast()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
			go func() {
				defer up.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					mu.Lock()
					for paused {
						cond.Wait()
					}
					mu.Unlock()
					if _, err := up.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "nats://" + ln.Addr().String(), func(p bool) {
		mu.Lock()
		paused = p
		cond.Broadcast()
		mu.Unlock()
	}
}

func TestUplink_AFlushIsAnsweredOnlyAfterTheEarlierBatchesReachedTheServer(t *testing.T) {
	srv := natsServer(t, -1)
	url, pause := pausingProxy(t, srv.Addr().String())
	var lines []string
	lines = append(lines, "#sleep 500ms")
	for i := range 5 {
		lines = append(lines, line("events", 0, batchData(t, "j", uint64(1+256*i), 256))) // about 60 KiB each
	}
	lines = append(lines, line("flush", 1, nil))
	// The agent talks through the proxy; the coordinator directly.
	c := newFakeCoord(t, srv.ClientURL(), uplinkJob(t, "j", 0, 1, lines...))
	e := startUplinkAgent(t, c, url, nil)
	waitOutput(t, e.a, "j", 1)
	pause(true) // before the process writes: what the agent sends now stays in the proxy
	time.Sleep(2 * time.Second)
	if out := outputLines(e.a, "j"); len(out) != 1 {
		t.Fatalf("the flush was answered (%q) while the batches before it had not reached the server", out[1:])
	}
	if n := len(c.published(t)); n != 0 {
		t.Fatalf("%d batches reached the server through a paused proxy", n)
	}
	pause(false)
	as := answers(t, waitOutput(t, e.a, "j", 2))
	wantReply(t, as[0], 1, "")
	if n := len(c.published(t)); n != 5 {
		t.Fatalf("the flush was answered when the server had %d of the 5 batches before it", n)
	}
}

func TestUplink_AFloodIsCutByTheBucket(t *testing.T) {
	srv := natsServer(t, -1)
	var lines []string
	for i := range 300 {
		lines = append(lines, line("events", 0, batchData(t, "j", uint64(1+i), 1)))
	}
	lines = append(lines, line("register", 1, registerData(t, "j")), // over the rate: answered with an error at once
		"#sleep 1500ms",
		line("flush", 2, nil), // batches since the last flush were dropped: an error, the SDK sends again
		line("flush", 3, nil))
	start := time.Now()
	url := srv.ClientURL()
	e := startUplinkAgent(t, newFakeCoord(t, url, uplinkJob(t, "j", 0, 3, lines...)), url, nil)
	as := answers(t, waitOutput(t, e.a, "j", 4))
	wantReply(t, as[0], 1, protocol.CodeUnavailable)
	if !strings.Contains(as[0].Error.Message, "rate") {
		t.Errorf("the register over the rate was refused with %q", as[0].Error.Message)
	}
	wantReply(t, as[1], 2, protocol.CodeUnavailable)
	wantReply(t, as[2], 3, "")
	n := len(e.c.published(t))
	most := uplinkLineBurst + int(time.Since(start).Seconds()*uplinkLineRate) + 1
	if n < uplinkLineBurst || n > most {
		t.Fatalf("%d of 300 batches forwarded; want the burst of %d and at most %d", n, uplinkLineBurst, most)
	}
	if s := e.a.UplinkStats(); s.OverRate < uint64(300-n) || s.Registers != 0 {
		t.Fatalf("stats %+v after %d batches forwarded", s, n)
	}
	if len(e.c.registered()) != 0 {
		t.Fatal("a register over the rate was forwarded")
	}
}

func TestUplink_ALineOverTheLimitClosesTheUplink(t *testing.T) {
	srv := natsServer(t, -1)
	limit := protocol.MaxUplinkLine(0)
	pad := func(n int) string { // an events line of n bytes whose data is no batch
		head := `{"v":1,"op":"events","data":{"pad":"`
		return head + strings.Repeat("x", n-len(head)-3) + `"}}`
	}
	url := srv.ClientURL()
	e := startUplinkAgent(t, newFakeCoord(t, url, uplinkJob(t, "j", 0, 0,
		pad(limit),            // at the limit: read, and dropped as no batch
		line("flush", 1, nil), // answered
		pad(limit+1),          // over it: the uplink closes
		line("flush", 2, nil), // never read
	)), url, nil)
	out := waitOutput(t, e.a, "j", 3)
	as := answers(t, out)
	if len(as) != 1 || out[2] != "eof" {
		t.Fatalf("output %q: want the reply to the first flush, then end of file", out)
	}
	wantReply(t, as[0], 1, "")
	if s := e.a.UplinkStats(); s.TooLong != 1 || s.Malformed != 1 || s.Flushes != 1 {
		t.Fatalf("stats %+v", s)
	}
	if !strings.Contains(e.logs.String(), "uplink closed: a line longer than the limit") {
		t.Fatal("the closing is not logged")
	}
}

func TestUplink_MultiProcessJobsGetNone(t *testing.T) {
	srv := natsServer(t, -1)
	ranks := uplinkJob(t, "ranks", 0, 0)
	ranks.Devices, ranks.Procs, ranks.WorldSize = []int{0, 1}, 2, 2
	gang := uplinkJob(t, "gang", 2, 0) // rank 0 of a job on two nodes
	gang.WorldSize = 2
	single := uplinkJob(t, "single", 3, 0)
	url := srv.ClientURL()
	e := startUplinkAgent(t, newFakeCoord(t, url, ranks, gang, single), url, nil)
	for job, n := range map[string]int{"ranks": 2, "gang": 1} {
		for _, l := range waitOutput(t, e.a, job, n) {
			if !strings.HasPrefix(l, "fd4=") || !strings.HasSuffix(l, "env=false") {
				t.Errorf("a process of %s saw %q, want no uplink", job, l)
			}
		}
	}
	if out := waitOutput(t, e.a, "single", 1); out[0] != "fd4=socket env=inode" {
		t.Fatalf("the single process saw %q", out[0])
	}
}

func TestUplink_OffGivesNone(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"uplink off": func(c *Config) { c.NoUplink = true },
		"relay off":  func(c *Config) { c.NoRelay = true },
	} {
		t.Run(name, func(t *testing.T) {
			srv := natsServer(t, -1)
			url := srv.ClientURL()
			e := startUplinkAgent(t, newFakeCoord(t, url, uplinkJob(t, "j", 0, 0)), url, mod)
			out := waitOutput(t, e.a, "j", 1)
			if !strings.HasPrefix(out[0], "fd4=") || !strings.HasSuffix(out[0], "env=false") {
				t.Fatalf("the process saw %q, want no uplink", out[0])
			}
			if e.a.uplinks != nil {
				t.Fatal("the agent has uplinks")
			}
		})
	}
}

func TestUplink_ReconnectedIsWrittenWhenTheAgentsConnectionIsBack(t *testing.T) {
	srv := natsServer(t, -1)
	port := srv.Addr().(*net.TCPAddr).Port
	url := srv.ClientURL()
	e := startUplinkAgent(t, newFakeCoord(t, url, uplinkJob(t, "j", 0, 4,
		line("flush", 1, nil),
		"#wait", "#wait", // the reply, then "reconnected"
		line("flush", 2, nil), // the connection was replaced since the last flush: an error
		line("flush", 3, nil))), url, nil)
	waitOutput(t, e.a, "j", 2)
	srv.Shutdown()
	srv.WaitForShutdown()
	time.Sleep(300 * time.Millisecond)
	if out := outputLines(e.a, "j"); len(out) != 2 {
		t.Fatalf("answers during the outage: %q", out[2:])
	}
	natsServer(t, port)
	as := answers(t, waitOutput(t, e.a, "j", 5))
	wantReply(t, as[0], 1, "")
	if as[1].Op != protocol.UplinkReconnected {
		t.Fatalf("after the outage: %+v, want %q", as[1], protocol.UplinkReconnected)
	}
	wantReply(t, as[2], 2, protocol.CodeUnavailable)
	wantReply(t, as[3], 3, "")
	if s := e.a.UplinkStats(); s.Notices != 1 {
		t.Fatalf("stats %+v, want one notice", s)
	}
}

func TestUplink_NoGoroutineOutlivesTheProcessEvenWhenItsChildHoldsTheSocket(t *testing.T) {
	srv := natsServer(t, -1)
	as := uplinkJob(t, "j", 0, 0)
	as.Env[0] = "AGENT_UPLINK_CHILD=grandchild"
	url := srv.ClientURL()
	e := startUplinkAgent(t, newFakeCoord(t, url, as), url, nil)
	out := waitOutput(t, e.a, "j", 2)
	pid, err := strconv.Atoi(strings.TrimPrefix(out[1], "grandchild "))
	if err != nil {
		t.Fatalf("output %q", out)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	eventually(t, 10*time.Second, "the exit reported", func() bool { return e.c.reported() == 1 })
	// The process exited; its child still holds the other end, so the
	// reader would never see end of file.
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the grandchild is gone")
	}
	assertNoUplinkGoroutines(t, e.a, uplinkDrain+3*time.Second)
}

func TestUplink_AProcessThatReadsNoAnswersBlocksOnlyItsOwnWriter(t *testing.T) {
	srv := natsServer(t, -1)
	var lines []string
	for i := range uplinkLineBurst {
		lines = append(lines, line("register", uint64(i+1), registerData(t, "deaf")))
	}
	deaf := uplinkJob(t, "deaf", 0, -1, lines...)
	url := srv.ClientURL()
	c := newFakeCoord(t, url, deaf)
	big := strings.Repeat("x", 60<<10)
	c.reply = func(r protocol.Register) []byte { // 100 answers of 60 KiB: far more than the socket holds
		return []byte(fmt.Sprintf(`{"v":1,"job":%q,"round":3,"last_seq":0,"steps_done":0,"epoch":0,"pad":%q}`, r.Job, big))
	}
	e := startUplinkAgent(t, c, url, nil)
	eventually(t, 20*time.Second, "answers dropped for the process that does not read", func() bool {
		return e.a.UplinkStats().Unanswered > 0
	})
	// The agent's loop still starts a run, whose uplink is answered.
	e.c.offer(t, deaf, uplinkJob(t, "other", 1, 2, line("register", 1, registerData(t, "other")), line("flush", 2, nil)))
	as := answers(t, waitOutput(t, e.a, "other", 3))
	wantReply(t, as[0], 1, "")
	wantReply(t, as[1], 2, "")
}

func eventually(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
