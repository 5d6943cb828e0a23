package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

func testLease(round int, pad int) *protocol.Lease {
	return &protocol.Lease{V: protocol.Version, Job: "j", Round: round, Action: protocol.Run, Workers: []int{0},
		Start: 1, Expiry: 2, Reason: strings.Repeat("r", pad)}
}

// within fails the test when done is not closed in time: a deadlock check,
// not a timing requirement.
func within(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: still blocked after 20s", what)
	}
}

func TestRelay_PostNeverBlocksOnAProcessThatDoesNotReadAndTheLatestLeaseArrives(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	x := newRelay(w)
	defer x.close()
	const n = 20000 // 20000 lines of 1 KB: hundreds of times a pipe's buffer
	posted := make(chan struct{})
	go func() {
		for i := range n {
			x.post(testLease(i, 1000))
		}
		close(posted)
	}()
	within(t, posted, "posting to a pipe nobody reads")
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	lines, last := 0, -1
	for last != n-1 && sc.Scan() {
		l, err := protocol.DecodeLease(sc.Bytes(), 0)
		if err != nil {
			t.Fatalf("line %d: %v", lines, err)
		}
		if l.Round <= last {
			t.Fatalf("round %d after round %d", l.Round, last)
		}
		last = l.Round
		lines++
	}
	if last != n-1 {
		t.Fatalf("the last lease read is of round %d, want %d (%v)", last, n-1, sc.Err())
	}
	if lines >= n {
		t.Errorf("%d lines for %d leases: the writer kept a backlog instead of the latest", lines, n)
	}
	t.Logf("%d leases posted, %d written", n, lines)
}

func TestRelay_AWriteErrorStopsTheWriter(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	x := newRelay(w)
	defer x.close()
	r.Close() // the process exited
	x.post(testLease(1, 0))
	within(t, x.stopped, "the writer after EPIPE")
	if err := x.stopErr(); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("stopped with %v, want EPIPE", err)
	}
	x.post(testLease(2, 0)) // does not block, does not panic
}

func TestRelay_CloseEndsAWriteBlockedOnAFullPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	x := newRelay(w)
	x.post(testLease(1, 256<<10)) // four times a pipe's buffer: the write blocks
	time.Sleep(50 * time.Millisecond)
	x.close()
	within(t, x.stopped, "the writer after close")
	x.close() // idempotent
}

// describeFD prints what descriptor fd of a started process is, against
// the variable env that should name it ("FD:INODE"): "fdN=closed",
// "fdN=other", "fdN=<kind> env=... inode=..." (another inode) or
// "fdN=<kind> env=inode", and reports whether it is the one named.
func describeFD(fd int, env string, mode uint32, kind string) bool {
	var st syscall.Stat_t
	v, set := os.LookupEnv(env)
	switch {
	case syscall.Fstat(fd, &st) != nil:
		fmt.Printf("fd%d=closed env=%v\n", fd, set)
		return false
	case st.Mode&syscall.S_IFMT != mode:
		fmt.Printf("fd%d=other env=%v\n", fd, set)
		return false
	case v != strconv.Itoa(fd)+":"+strconv.FormatUint(st.Ino, 10):
		fmt.Printf("fd%d=%s env=%q inode=%d\n", fd, kind, v, st.Ino)
		return false
	}
	fmt.Printf("fd%d=%s env=inode\n", fd, kind)
	return true
}

// RelayChild is the process the relay tests start through the agent (the
// test binary again, run by TestMain in harness_test.go when
// $AGENT_RELAY_CHILD is set): it prints what its descriptor 3 is, then
// every line read from it, then "eof".
func RelayChild() int {
	if !describeFD(leaseFD, protocol.EnvLeaseFD, syscall.S_IFIFO, "pipe") {
		return 0
	}
	if os.Getenv("AGENT_RELAY_CHILD") == "exit" {
		return 0
	}
	sc := bufio.NewScanner(os.NewFile(leaseFD, "lease pipe"))
	for sc.Scan() {
		fmt.Println(sc.Text())
	}
	fmt.Println("eof")
	return 0
}

// relayAgent is an agent with no connection, for calling start directly.
func relayAgent(t *testing.T, noRelay bool) *Agent {
	nop := zerolog.Nop()
	return &Agent{cfg: Config{Node: "n0", GPUs: 2, URL: "nats://127.0.0.1:1", WorkDir: t.TempDir(), Prefix: protocol.DefaultPrefix,
		Env: baseEnv(os.Environ()), NoRelay: noRelay, Logger: &nop, KillGrace: time.Second}, log: nop,
		exits: make(chan exit, 4), runs: map[runKey]*run{}, finished: map[runKey]bool{}}
}

func outputLines(a *Agent, job string) []string {
	data, _ := os.ReadFile(filepath.Join(a.cfg.WorkDir, job, "output.log"))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if l != "" && !strings.HasPrefix(l, "--- shockwave agent") { // "": no output yet
			out = append(out, l)
		}
	}
	return out
}

func waitOutput(t *testing.T, a *Agent, job string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if out := outputLines(a, job); len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %d lines of output: %q", n, outputLines(a, job))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func relayAssignment(lease *protocol.Lease) protocol.Assignment {
	return protocol.Assignment{Job: "j", Command: []string{os.Args[0], "-test.run=XXX"}, Env: []string{"AGENT_RELAY_CHILD=1"},
		Devices: []int{0}, Procs: 1, WorldSize: 1, Expiry: 100, Lease: lease}
}

func TestRelay_AStartedProcessReadsItsLeasesOnFD3NamedByInode(t *testing.T) {
	a := relayAgent(t, false)
	desired := func(round int, lease *protocol.Lease) *desiredAt {
		d := &protocol.NodeDesired{V: protocol.Version, Node: "n0", Round: round, Now: 10, Epoch: 3}
		if lease != nil {
			d.Jobs = []protocol.Assignment{relayAssignment(lease)}
		}
		return &desiredAt{d: d, at: time.Now()}
	}
	run1 := testLease(7, 0)
	a.apply(desired(7, run1)) // starts the run
	out := waitOutput(t, a, "j", 2)
	if out[0] != "fd3=pipe env=inode" {
		t.Fatalf("the process saw %q, want its pipe on fd 3 named by inode", out[0])
	}
	if want, _ := protocol.MarshalLease(run1); out[1] != string(want) {
		t.Fatalf("first lease line %q, want %q", out[1], want)
	}
	// The same lease again (a heartbeat's answer) writes nothing; a renewal does.
	a.apply(desired(7, testLease(7, 0)))
	run2 := testLease(8, 0)
	a.apply(desired(8, run2))
	out = waitOutput(t, a, "j", 3)
	if want, _ := protocol.MarshalLease(run2); out[2] != string(want) {
		t.Fatalf("second lease line %q, want %q (%q)", out[2], want, out)
	}
	// The run leaves the desired state: one SUSPEND, however often.
	a.apply(desired(9, nil))
	a.apply(desired(10, nil))
	out = waitOutput(t, a, "j", 4)
	l, err := protocol.DecodeLease([]byte(out[3]), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.Lease{V: protocol.Version, Job: "j", Round: 9, Action: protocol.Suspend, Epoch: 3, Start: 10, Expiry: 10,
		Reason: "not granted on node n0 in round 9"}
	if fmt.Sprint(*l) != fmt.Sprint(want) {
		t.Fatalf("suspend line %+v, want %+v", *l, want)
	}
	if len(a.runs) != 1 {
		t.Fatalf("%d runs", len(a.runs))
	}
	for _, r := range a.runs {
		r.closeRelays() // the run ends: the process reads end of file
	}
	out = waitOutput(t, a, "j", 5)
	if len(out) != 5 || out[4] != "eof" {
		t.Fatalf("output %q: want exactly the two RUN leases, one SUSPEND, then eof", out)
	}
	within(t, exited(a), "the process after end of file")
}

func TestRelay_AProcessThatExitedStopsItsWriter(t *testing.T) {
	a := relayAgent(t, false)
	as := relayAssignment(nil)
	as.Env = []string{"AGENT_RELAY_CHILD=exit"}
	r, err := a.start(as, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer r.closeRelays()
	within(t, exited(a), "the process")
	// Only the process held the read end (the agent closed its copy after
	// starting it), so the write fails with EPIPE and the writer stops.
	a.relayRun(r, testLease(1, 0))
	within(t, r.relays[0].stopped, "the writer of an exited process")
	if err := r.relays[0].stopErr(); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("stopped with %v, want EPIPE", err)
	}
}

func TestRelay_WithRelayOffAProcessGetsNoPipe(t *testing.T) {
	a := relayAgent(t, true)
	r, err := a.start(relayAssignment(testLease(1, 0)), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	out := waitOutput(t, a, "j", 1)
	if out[0] != "fd3=closed env=false" && out[0] != "fd3=other env=false" {
		t.Fatalf("the process saw %q, want no pipe and no %s", out[0], protocol.EnvLeaseFD)
	}
	if len(r.relays) != 0 {
		t.Fatalf("%d relays with relay off", len(r.relays))
	}
	within(t, exited(a), "the process")
}

// exited is closed when a process of a reported its exit.
func exited(a *Agent) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		<-a.exits
		close(done)
	}()
	return done
}
