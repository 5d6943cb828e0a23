package sdk_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// Leases relayed by a node agent through a pipe ($SHOCKWAVE_LEASE_FD). The
// test binary doubles as the job process (leaseFDChild) the way an agent
// starts it: the pipe's read end as descriptor 3, EXIT mode.

// leaseFDChild registers, prints whether the registration says relayed,
// then prints a line at every lease change until Preempt or Stop.
func leaseFDChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := sdk.Register(ctx, sdk.WithModel("test-model"), sdk.WithBatchSize(8), sdk.WithDatasetSize(64),
		sdk.WithEpochs(100), sdk.WithLogger(quiet), sdk.WithRegisterTimeout(20*time.Second))
	if err != nil {
		fmt.Println("register error:", err)
		return 1
	}
	defer j.Close()
	fmt.Println("registered relayed=" + strconv.FormatBool(j.Relayed()))
	fmt.Println("grandchild " + descriptor3Child())
	for {
		ch := j.Changed()
		d := j.Boundary()
		if l, ok := j.Lease(); ok {
			fmt.Printf("lease round=%d action=%s epoch=%d directive=%s bad=%d\n", l.Round, l.Action, l.Epoch, d, j.Stats().BadLeases)
		}
		if _, ok := j.Lease(); ok && (d == sdk.Preempt || d == sdk.Stop) {
			return 0
		}
		select {
		case <-ch:
		case <-ctx.Done():
			fmt.Println("timed out")
			return 1
		}
	}
}

// descriptor3Child runs a child of the job process that says what its
// descriptor 3 is: the job's own children must not inherit the pipe.
func descriptor3Child() string {
	cmd := exec.Command(os.Args[0], "-test.run=XXX")
	cmd.Env = append(os.Environ(), "SDK_FD3_PROBE=1")
	cmd.Env = slicesDelete(cmd.Env, "SDK_LEASEFD_CHILD=")
	out, err := cmd.Output()
	if err != nil {
		return "error " + err.Error()
	}
	return strings.TrimSpace(string(out))
}

func slicesDelete(env []string, prefix string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// fd3Probe prints "fd3=agent-pipe" when descriptor 3 is the pipe that
// $SHOCKWAVE_LEASE_FD names, else what it is.
func fd3Probe() int {
	var st syscall.Stat_t
	if err := syscall.Fstat(3, &st); err != nil {
		fmt.Println("fd3=closed")
		return 0
	}
	_, ino, _ := strings.Cut(os.Getenv(sdk.EnvLeaseFD), ":")
	if st.Mode&syscall.S_IFMT == syscall.S_IFIFO && strconv.FormatUint(st.Ino, 10) == ino {
		fmt.Println("fd3=agent-pipe")
		return 0
	}
	fmt.Println("fd3=other")
	return 0
}

// pipeProc is a job process started with a pipe on descriptor 3.
type pipeProc struct {
	cmd   *exec.Cmd
	w     *os.File       // the pipe's write end (the agent's side)
	in    io.WriteCloser // the process's standard input
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

// startPipeProc starts the job process with a new pipe as descriptor 3 and
// $SHOCKWAVE_LEASE_FD naming it; inodeDelta != 0 names the wrong inode.
func startPipeProc(t *testing.T, c *sdktest.Coordinator, id string, inodeDelta uint64) *pipeProc {
	t.Helper()
	return startJobProc(t, "SDK_LEASEFD_CHILD", []string{sdk.EnvURL + "=" + c.URL(), sdk.EnvJob + "=" + id, sdk.EnvExit + "=1"}, inodeDelta)
}

// startJobProc starts the test binary as the job process that the
// variable child selects in TestMain, with env added, a new pipe as
// descriptor 3 named by $SHOCKWAVE_LEASE_FD (inodeDelta != 0 names the
// wrong inode), and extra as descriptors 4, 5, … (closed here once the
// process holds them).
func startJobProc(t *testing.T, child string, env []string, inodeDelta uint64, extra ...*os.File) *pipeProc {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := r.Stat()
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino + inodeDelta
	p := &pipeProc{w: w, done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=XXX")
	p.cmd.Env = append(append(os.Environ(), child+"=1", sdk.EnvLeaseFD+"=3:"+strconv.FormatUint(ino, 10)), env...)
	p.cmd.ExtraFiles = append([]*os.File{r}, extra...)
	p.cmd.Stderr = os.Stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	for _, f := range extra {
		f.Close()
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		w.Close()
	})
	return p
}

func (p *pipeProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// waitLine waits for output line n (0-based) and returns it.
func (p *pipeProc) waitLine(t *testing.T, n int) string {
	t.Helper()
	sdktest.Eventually(t, 30*time.Second, fmt.Sprintf("line %d of the job process (so far %q)", n, p.output()), func() bool {
		return len(p.output()) > n
	})
	return p.output()[n]
}

// writeLine writes raw bytes and a newline on the pipe, as the agent does.
func (p *pipeProc) writeLine(t *testing.T, line []byte) {
	t.Helper()
	if _, err := p.w.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
}

func (p *pipeProc) writeLease(t *testing.T, l protocol.Lease) {
	t.Helper()
	l.V = protocol.Version
	data, err := protocol.MarshalLease(&l)
	if err != nil {
		t.Fatal(err)
	}
	p.writeLine(t, data)
}

// registrations records the Register messages the coordinator receives.
func registrations(t *testing.T, c *sdktest.Coordinator) func(job string) []protocol.Register {
	var mu sync.Mutex
	var regs []protocol.Register
	nc := c.Client()
	if _, err := nc.Subscribe(c.Subj.Register(), func(m *nats.Msg) {
		var r protocol.Register
		if json.Unmarshal(m.Data, &r) == nil {
			mu.Lock()
			regs = append(regs, r)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func(job string) []protocol.Register {
		mu.Lock()
		defer mu.Unlock()
		var out []protocol.Register
		for _, r := range regs {
			if r.Job == job {
				out = append(out, r)
			}
		}
		return out
	}
}

// natsLeases counts the leases published on job's NATS subject.
func natsLeases(t *testing.T, c *sdktest.Coordinator, job string) func() int {
	var mu sync.Mutex
	n := 0
	nc := c.Client()
	if _, err := nc.Subscribe(c.Subj.Lease(job), func(*nats.Msg) {
		mu.Lock()
		n++
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// rawLeasePipe makes a pipe whose read end is a raw descriptor that the
// SDK owns and closes, as in a job process, names it in
// SHOCKWAVE_LEASE_FD, and returns the write end (the agent's).
func rawLeasePipe(t testing.TB) *os.File {
	t.Helper()
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fds[0], &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv(sdk.EnvLeaseFD, fmt.Sprintf("%d:%d", fds[0], st.Ino))
	return os.NewFile(uintptr(fds[1]), "write end")
}

func nowSeconds() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func TestLeaseFD_LeasesOnTheAgentsPipeDriveTheJobAndBadLinesAreIgnored(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour}) // the coordinator issues no lease during the test
	regs := registrations(t, c)
	published := natsLeases(t, c, "piped")
	p := startPipeProc(t, c, "piped", 0)
	if got := p.waitLine(t, 0); got != "registered relayed=true" {
		t.Fatalf("first line %q, want registered relayed=true", got)
	}
	if r := regs("piped"); len(r) != 1 || !r[0].Relayed {
		t.Fatalf("the coordinator received %+v, want one registration with relayed=true", r)
	}
	if got := p.waitLine(t, 1); got != "grandchild fd3=closed" && got != "grandchild fd3=other" {
		t.Errorf("the job's own child: %q (the pipe must be close-on-exec)", got)
	}
	now := nowSeconds()
	p.writeLine(t, []byte(`{"v":1,"job":"piped","round":3,"action":"RUN"`)) // garbage: cut short
	p.writeLine(t, []byte(strings.Repeat("x", protocol.DefaultMaxMessageBytes+100)))
	p.writeLease(t, protocol.Lease{Job: "other", Round: 99, Action: protocol.Run, Workers: []int{0}, Epoch: 5, Start: now, Expiry: now + 60})
	p.writeLine(t, nil) // a blank line: skipped
	p.writeLease(t, protocol.Lease{Job: "piped", Round: 10, Action: protocol.Run, Workers: []int{0}, Epoch: 5, Start: now, Expiry: now + 60})
	if got, want := p.waitLine(t, 2), "lease round=10 action=RUN epoch=5 directive=continue bad=3"; got != want {
		t.Fatalf("after the good RUN lease: %q, want %q", got, want)
	}
	// A deposed leader's SUSPEND (epoch 4) is ignored: the RUN of the same
	// round from epoch 5 is taken (after a SUSPEND of round 11 it would not be).
	p.writeLease(t, protocol.Lease{Job: "piped", Round: 11, Action: protocol.Suspend, Epoch: 4, Start: now, Expiry: now})
	p.writeLease(t, protocol.Lease{Job: "piped", Round: 11, Action: protocol.Run, Workers: []int{0}, Epoch: 5, Start: now, Expiry: now + 60})
	if got, want := p.waitLine(t, 3), "lease round=11 action=RUN epoch=5 directive=continue bad=3"; got != want {
		t.Fatalf("after an epoch-4 SUSPEND and an epoch-5 RUN: %q, want %q", got, want)
	}
	p.writeLease(t, protocol.Lease{Job: "piped", Round: 12, Action: protocol.Suspend, Epoch: 5, Start: now, Expiry: now,
		Reason: "not granted on node n0 in round 12"})
	if got, want := p.waitLine(t, 4), "lease round=12 action=SUSPEND epoch=5 directive=preempt bad=3"; got != want {
		t.Fatalf("after the SUSPEND: %q, want %q", got, want)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the job process did not exit after Preempt")
	}
	if n := published(); n != 0 {
		t.Errorf("%d leases were published on NATS; the test wanted the pipe alone", n)
	}
}

func TestLeaseFD_APipeWithAnotherInodeIsNotReadAndTheRegistrationSaysNotRelayed(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	regs := registrations(t, c)
	p := startPipeProc(t, c, "misnamed", 1)
	if got := p.waitLine(t, 0); got != "registered relayed=false" {
		t.Fatalf("first line %q, want registered relayed=false", got)
	}
	if r := regs("misnamed"); len(r) != 1 || r[0].Relayed {
		t.Fatalf("the coordinator received %+v, want one registration with relayed=false", r)
	}
	now := nowSeconds()
	// Round 20 on the pipe would make the NATS lease of round 5 stale.
	p.writeLease(t, protocol.Lease{Job: "misnamed", Round: 20, Action: protocol.Run, Workers: []int{0}, Start: now, Expiry: now + 60})
	c.PublishLease(c.Client(), protocol.Lease{Job: "misnamed", Round: 5, Action: protocol.Run, Workers: []int{0}, Start: now, Expiry: now + 60})
	if got, want := p.waitLine(t, 2), "lease round=5 action=RUN epoch=0 directive=continue bad=0"; got != want {
		t.Fatalf("after a RUN on the pipe and one over NATS: %q, want %q", got, want)
	}
	c.PublishLease(c.Client(), protocol.Lease{Job: "misnamed", Round: 6, Action: protocol.Suspend, Start: now, Expiry: now})
	if got, want := p.waitLine(t, 3), "lease round=6 action=SUSPEND epoch=0 directive=preempt bad=0"; got != want {
		t.Fatalf("after a SUSPEND over NATS: %q, want %q", got, want)
	}
}

func TestLeaseFD_ADescriptorThatIsNotAPipeIsNotRead(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	f, err := os.CreateTemp(t.TempDir(), "not-a-pipe")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	t.Setenv(sdk.EnvLeaseFD, fmt.Sprintf("%d:%d", f.Fd(), fi.Sys().(*syscall.Stat_t).Ino))
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "filed"), sdk.WithEpochs(10))...)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j.Relayed() {
		t.Fatal("a regular file was taken for the agent's pipe")
	}
	if _, err := f.WriteString("still open\n"); err != nil {
		t.Fatalf("the SDK touched a descriptor that is not its pipe: %v", err)
	}
}

func TestLeaseFD_AMalformedVariableIsAnErrorNamingIt(t *testing.T) {
	malformedFDVariable(t, sdk.EnvLeaseFD, "3", "x:5", "3:", "3:y", "1:5", "-4:5", "3:0", "3:5:6")
}

// malformedFDVariable checks that each value of the descriptor variable
// env makes Register fail with an error naming the variable and the value,
// and that nothing reaches the coordinator.
func malformedFDVariable(t *testing.T, env string, values ...string) *sdktest.Coordinator {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	for _, v := range values {
		t.Setenv(env, v)
		j, err := sdk.Register(context.Background(), append(baseOptions(c, "malformed"), sdk.WithEpochs(10))...)
		if err == nil {
			j.Close()
			t.Errorf("%s=%q: registered", env, v)
			continue
		}
		if !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), strconv.Quote(v)) {
			t.Errorf("%s=%q: error %q names neither the variable nor the value", env, v, err)
		}
	}
	if _, ok := c.Job("malformed"); ok {
		t.Error("a refused job reached the coordinator")
	}
	return c
}

func TestLeaseFD_CloseEndsTheReaderAndEndOfFileTurnsRelayOff(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	for _, end := range []string{"close", "eof"} {
		// A raw read end: the SDK owns and closes it, as in a job process.
		w := rawLeasePipe(t)
		id := "inproc-" + end
		j, err := sdk.Register(context.Background(), append(baseOptions(c, id), sdk.WithEpochs(10))...)
		if err != nil {
			t.Fatal(err)
		}
		if !j.Relayed() {
			t.Fatalf("%s: the pipe was not taken", end)
		}
		now := nowSeconds()
		l := protocol.Lease{V: protocol.Version, Job: id, Round: 1, Action: protocol.Run, Workers: []int{0}, Start: now, Expiry: now + 60}
		data, _ := protocol.MarshalLease(&l)
		if _, err := w.Write(append(data, '\n')); err != nil {
			t.Fatal(err)
		}
		sdktest.Eventually(t, 10*time.Second, "running on the piped lease", func() bool { return j.LeaseState() == sdk.Running })
		switch end {
		case "close":
			done := make(chan struct{})
			go func() { j.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Close did not return while the reader waited on the pipe")
			}
			if _, err := w.Write([]byte("x\n")); err == nil {
				t.Error("the read end is still open after Close")
			}
		case "eof":
			w.Close()
			sdktest.Eventually(t, 10*time.Second, "relay off after end of file", func() bool { return !j.Relayed() })
			j.Close()
		}
		w.Close()
	}
}

func TestLeaseFD_ARankAbove0DoesNotReadThePipeAndClosesIt(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	w := rawLeasePipe(t)
	defer w.Close()
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "ranked"), sdk.WithEpochs(10), sdk.WithRank(1, 2))...)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if j.Relayed() {
		t.Error("rank 1 says it reads the pipe; rank 0 follows the leases")
	}
	if _, err := w.Write([]byte("{}\n")); !errors.Is(err, syscall.EPIPE) {
		t.Errorf("writing to rank 1's pipe: %v, want EPIPE (rank 1 closes it, so the agent stops writing)", err)
	}
}

func TestLeaseFD_AFailedRegisterLeavesThePipeToTheNext(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	w := rawLeasePipe(t)
	defer w.Close()
	opts := append(baseOptions(c, "retried"), sdk.WithEpochs(10))
	if _, err := sdk.Register(context.Background(), append(opts, sdk.WithURL("nats://127.0.0.1:1"))...); err == nil {
		t.Fatal("registered with no server")
	}
	j, err := sdk.Register(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if !j.Relayed() {
		t.Fatal("the second Register did not take the pipe")
	}
	now := nowSeconds()
	l := protocol.Lease{V: protocol.Version, Job: "retried", Round: 1, Action: protocol.Run, Workers: []int{0}, Start: now, Expiry: now + 60}
	data, _ := protocol.MarshalLease(&l)
	if _, err := w.Write(append(data, '\n')); err != nil {
		t.Fatal(err)
	}
	sdktest.Eventually(t, 10*time.Second, "running on the piped lease", func() bool { return j.LeaseState() == sdk.Running })
}
