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

	"github.com/shockwave-sched/shockwave/internal/syncbuf"
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
	if !describeFD(uplinkFD, protocol.EnvUplinkFD, syscall.S_IFSOCK, "socket") {
		return 0
	}
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
	subs    map[string]*nats.Subscription    // by subject

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
	c.subs = map[string]*nats.Subscription{}
	for subject, cb := range subs {
		sub, err := nc.Subscribe(subject, cb)
		if err != nil {
			t.Fatal(err)
		}
		c.subs[subject] = sub
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
type syncBuffer = syncbuf.Buffer

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
