package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

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

// TestUplink_WithNobodyOnTheRegisterSubjectTheProcessIsToldToConnectItself:
// under a coordinator that takes no registrations on the node's subject
// (older than the agent), a register is answered no_uplink, not
// unavailable (which the SDK would retry for ever), so the SDK registers
// over NATS.
func TestUplink_WithNobodyOnTheRegisterSubjectTheProcessIsToldToConnectItself(t *testing.T) {
	srv := natsServer(t, -1)
	url := srv.ClientURL()
	c := newFakeCoord(t, url, uplinkJob(t, "j", 0, 1, line("register", 1, registerData(t, "j"))))
	if err := c.subs[c.subj.AgentRegister("n0")].Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e := startUplinkAgent(t, c, url, nil)
	as := answers(t, waitOutput(t, e.a, "j", 2))
	wantReply(t, as[0], 1, protocol.CodeNoUplink)
}

// With nothing on the heartbeat subject either, no coordinator leads at
// this moment (a failover): the process is told to retry, not to give the
// uplink up for its lifetime.
func TestUplink_WithNoCoordinatorLeadingTheProcessIsToldToRetry(t *testing.T) {
	srv := natsServer(t, -1)
	url := srv.ClientURL()
	c := newFakeCoord(t, url, uplinkJob(t, "j", 0, 1, line("register", 1, registerData(t, "j"))))
	for _, subject := range []string{c.subj.AgentRegister("n0"), c.subj.AgentHeartbeat("n0")} {
		if err := c.subs[subject].Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e := startUplinkAgent(t, c, url, nil)
	as := answers(t, waitOutput(t, e.a, "j", 2))
	wantReply(t, as[0], 1, protocol.CodeUnavailable)
	if st := e.a.UplinkStats(); st.Failed != 1 {
		t.Errorf("uplink stats %+v: want the registration counted as failed", st)
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
