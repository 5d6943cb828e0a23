package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	ossignal "os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// The load test of the README: N registered jobs (default 2,000), each
// sending one progress batch per second, against the coordinator with its
// embedded NATS server, the Shockwave policy and 5 s rounds. The jobs run in
// a child process, one NATS connection each, so that the CPU this process
// uses is the coordinator's (service and embedded server). It reports
// CPU use, the latency from a batch's publication to its events applied to
// the state (the child stamps the send time in a header), and the time from
// each round's timer to its last lease flushed. Run it with
//
//	SHOCKWAVE_LOAD=1 go test ./coordinator -run TestLoad -v -timeout 10m
//
// (SHOCKWAVE_LOAD_JOBS, _GPUS, _ROUND, _SECONDS and _PROCS change the
// shape). SHOCKWAVE_LOAD=10k is the scale preset of docs/scale.md: 10,000
// jobs on 2,560 GPUs, the jobs spread over child processes of at most 2,500
// jobs each:
//
//	SHOCKWAVE_LOAD=10k go test ./coordinator -run TestLoad -v -timeout 30m
//
// Every phase is bounded: registration by 2 minutes plus 20 ms a job, the
// measurement by _SECONDS, the replay by 10 minutes. SHOCKWAVE_LOAD_NATS=process
// runs the NATS server in a process of its own (loadNATS);
// SHOCKWAVE_LOAD_MEMLIMIT=MiB sets the coordinator's Go memory limit;
// SHOCKWAVE_LOAD_PULL=N how many log records the consumer asks for at a
// time (default the client's 500). With the server in its own process,
// SHOCKWAVE_LOAD_SERVER_GOGC sets that process's GOGC and
// SHOCKWAVE_LOAD_SERVER_GCTRACE=1 prints its collections.
// SHOCKWAVE_LOAD_GC_HOLD=0 leaves the collector alone during rounds, as
// --gc-hold=false does (gchold.go). SHOCKWAVE_LOAD_CARRY sets the
// window in which the batches agents carry share a log record (a
// duration; "-1ms": a record per batch; carry.go).
// SHOCKWAVE_LOAD_NICE=19 runs the emulated cluster's processes at that
// niceness (loadClusterChild); SHOCKWAVE_LOAD_SNAPSHOT_ROUNDS=N sets the
// service's snapshot interval (0: its default);
// SHOCKWAVE_LOAD_POLICY_CONFIG=JSON configures the Shockwave policy (e.g.
// {"forecast_budget": 500000}); SHOCKWAVE_LOAD_HISTORY=N runs N jobs of the
// load's model to completion first (load_history_test.go);
// SHOCKWAVE_LOAD_GOMAXPROCS=N sets the coordinator's process's GOMAXPROCS
// (its children keep the default); SHOCKWAVE_LOAD_SCRAPE=DURATION scrapes
// /metrics at that interval, as Prometheus would, and
// SHOCKWAVE_LOAD_WEB=DURATION gets /api/state, as the web view does
// (load_scrape_test.go).
// Each round's line
// splits its leases into RUN leases that extend a grant, other RUN leases
// (started or moved) and SUSPEND leases.

const hdrSent = "Shockwave-Sent"

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestLoad_ManyJobsOneEventPerSecond(t *testing.T) {
	if os.Getenv("SHOCKWAVE_LOAD") == "" {
		t.Skip("set SHOCKWAVE_LOAD=1 to run the load test")
	}
	jobs, gpus := loadShape()
	round, window := envInt("SHOCKWAVE_LOAD_ROUND", 5), envInt("SHOCKWAVE_LOAD_SECONDS", 60)
	procs := envInt("SHOCKWAVE_LOAD_PROCS", (jobs+loadJobsPerProc-1)/loadJobsPerProc)
	if n := envInt("SHOCKWAVE_LOAD_GOMAXPROCS", 0); n > 0 {
		// The coordinator's process only (its children keep the default).
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(n))
		t.Logf("GOMAXPROCS of the coordinator's process: %d", n)
	}
	if mib := envInt("SHOCKWAVE_LOAD_MEMLIMIT", 0); mib > 0 {
		// The coordinator's process only, as GOMEMLIMIT would set it for
		// `shockwave coordinator` (its children keep the default).
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(mib) << 20))
		t.Logf("Go memory limit of the coordinator's process: %d MiB", mib)
	}
	srv := startLoadNATS(t)
	nc := srv.nc
	var mu sync.Mutex
	var lat, stored, ticks, all []time.Duration
	var late []time.Time // when the batches over 10 ms were sent
	measuring := false
	cfg := ServiceConfig{Core: loadCore(gpus, round), Policy: "shockwave", logPull: envInt("SHOCKWAVE_LOAD_PULL", 0),
		SnapshotRounds: envInt("SHOCKWAVE_LOAD_SNAPSHOT_ROUNDS", 0), AgentsCarryResidents: loadResidentsMode(),
		KeepGCPercent: os.Getenv("SHOCKWAVE_LOAD_GC_HOLD") == "0"}
	if loadPolicyConfig(&cfg) {
		t.Logf("policy configuration: %s", os.Getenv("SHOCKWAVE_LOAD_POLICY_CONFIG"))
	}
	if v := os.Getenv("SHOCKWAVE_LOAD_CARRY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("SHOCKWAVE_LOAD_CARRY=%q: %v", v, err)
		}
		cfg.CarryWindow = d
	}
	if os.Getenv("SHOCKWAVE_LOAD_LOG") != "" { // the coordinator's warnings and errors on stderr
		lg := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
		cfg.Logger = &lg
	}
	var regFirst, regLast time.Time // the registration phase's first and last registration folded
	regCount := 0
	cfg.onApply = func(r record, o *outcome) {
		if o.kind == kindRegister {
			mu.Lock()
			if regCount++; regCount == 1 {
				regFirst = time.Now()
			}
			regLast = time.Now()
			mu.Unlock()
		}
		if o.kind != kindEvents || o.accepted == 0 {
			return
		}
		sent, err := strconv.ParseInt(r.Header.Get(hdrSent), 10, 64)
		mu.Lock()
		if measuring && err == nil {
			d := time.Since(time.Unix(0, sent))
			lat = append(lat, d)
			stored = append(stored, time.Since(r.Time))
			if d > 10*time.Millisecond {
				late = append(late, time.Unix(0, sent))
			}
		}
		mu.Unlock()
	}
	var phases []roundTimes
	granted := map[string]bool{} // jobs granted GPUs in some round
	steps := map[string][]time.Duration{}
	registering := true
	history := loadHistory() > 0 // rounds of the history phase are not the load's
	cfg.onStep = func(kind string, d time.Duration) {
		mu.Lock()
		switch {
		case measuring:
			steps[kind] = append(steps[kind], d)
		case registering && (kind == kindRegister || kind == kindEvents):
			steps["registration phase: "+kind] = append(steps["registration phase: "+kind], d)
		}
		mu.Unlock()
	}
	cfg.onStore = func(step string, d time.Duration) {
		t.Logf("state snapshot: %s took %v (at %s)", step, d, time.Now().Format("15:04:05.000"))
	}
	cfg.onRound = func(r *Round, times roundTimes) {
		d := times.Total()
		mu.Lock()
		phase := "warm-up"
		if history {
			phase = "history"
		} else if r.Active > 0 {
			all = append(all, d)
			phases = append(phases, times)
		}
		if measuring {
			ticks, phase = append(ticks, d), "measured"
		}
		mu.Unlock()
		for _, l := range r.Leases {
			if l.Action == protocol.Run && !strings.HasPrefix(l.Job, loadHistoryPrefix) {
				granted[l.Job] = true
			}
		}
		kept, started, suspended := leaseKinds(r.Leases)
		t.Logf("round %d (%s, fired %s): %d active, %d leases (%d sent, %d relayed, %d held for jobs with no process yet, %d covered; RUN kept %d, RUN new or moved %d, SUSPEND %d), %d desired states, solved %v, tick to last lease %v (tick trip %v, to the solve %v, solve %v of which admissions %v, to the plan record %v, plan trip %v, close %v, publish %v; collections %d)",
			r.Index, phase, times.Fired.Format("15:04:05.000"), r.Active, len(r.Leases), times.Leases, times.Relayed, times.Held, len(r.Covered), kept, started, suspended, times.Desired, r.Plan.Solved, d, times.Opened.Sub(times.Fired),
			times.SolveBegan.Sub(times.Opened), times.Solve, times.Admitted, times.PlanAsked.Sub(times.SolveBegan)-times.Solve,
			times.PlanBack.Sub(times.PlanAsked), times.Closed.Sub(times.PlanBack), times.Published.Sub(times.Closed), times.GCCycles)
	}
	var scraper *loadScraper
	scrapeEnv := "SHOCKWAVE_LOAD_SCRAPE"
	if os.Getenv(scrapeEnv) != "" {
		scraper = newLoadScraper("/metrics")
	} else if scrapeEnv = "SHOCKWAVE_LOAD_WEB"; os.Getenv(scrapeEnv) != "" {
		scraper = newLoadScraper("/api/state")
	}
	if scraper != nil {
		cfg.Metrics = NewMetrics(scraper.reg)
	}
	svc, err := NewService(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Run(ctx) }()
	eventually(t, 10*time.Second, "the service serves", func() bool { return svc.Health().OK })
	if scraper != nil {
		every, err := time.ParseDuration(os.Getenv(scrapeEnv))
		if err != nil || every <= 0 {
			t.Fatalf("%s=%q: want a positive duration", scrapeEnv, os.Getenv(scrapeEnv))
		}
		scraper.start(svc, every)
	}

	var children []*exec.Cmd
	var exited <-chan error
	endHistory := func() {
		runLoadHistory(t, nc, srv.url, loadHistory())
		mu.Lock()
		history = false
		mu.Unlock()
	}
	if loadAgentsMode() {
		children, exited = startLoadAgents(t, nc, srv.url, jobs, gpus, procs, endHistory)
	} else {
		endHistory()
		children, exited = startLoadChildren(t, srv.url, jobs, procs)
	}
	defer func() {
		for _, c := range children {
			_ = c.Process.Kill()
		}
	}()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	// The whole job table once a second, not eventually's 200 times: each
	// reply is every job's row (3 MB at 10,000 jobs), which an operator
	// does not ask for at that rate.
	deadline := time.Now().Add(120*time.Second + time.Duration(jobs)*20*time.Millisecond)
	for loadJobsListed(status(t, nc, subj)) < jobs {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until every job is registered")
		}
		select {
		case err := <-exited:
			t.Fatalf("a job process exited while the jobs registered: %v", err)
		case <-time.After(time.Second):
		}
	}
	mu.Lock()
	registering = false
	t.Logf("registrations folded: %d in %v, the first to the last", regCount, regLast.Sub(regFirst).Round(time.Millisecond))
	mu.Unlock()
	rss, peak := memory(t)
	t.Logf("every job registered: coordinator RSS %d MiB, peak %d MiB", rss>>20, peak>>20)
	time.Sleep(time.Duration(2*round) * time.Second) // warm up: admission, first solves
	rss, peak = memory(t)
	t.Logf("after the warm-up: coordinator RSS %d MiB, peak %d MiB", rss>>20, peak>>20)
	logForecastPriors(t, status(t, nc, subj))
	before, srvBefore := cpuTime(t), srv.cpu(t)
	jobsBefore, machineBefore := childrenCPU(t, children), machineCPU(t)
	mu.Lock()
	measuring = true
	mu.Unlock()
	start, sched := time.Now(), schedLatencies()
	stopProfile, stopServerProfile := startLoadProfile(t), srv.profile(t)
	time.Sleep(time.Duration(window) * time.Second)
	stopProfile()
	stopServerProfile()
	mu.Lock()
	measuring = false
	cpu, wall := cpuTime(t)-before, time.Since(start)
	srvCPU := srv.cpu(t) - srvBefore
	jobsCPU, machine := childrenCPU(t, children)-jobsBefore, machineCPU(t).since(machineBefore)
	l, st, tk, al := slices.Clone(lat), slices.Clone(stored), slices.Clone(ticks), slices.Clone(all)
	mu.Unlock()
	slices.Sort(st)
	slices.Sort(l)
	slices.Sort(tk)
	slices.Sort(al)
	if len(l) == 0 || len(tk) == 0 {
		t.Fatalf("no measurements: %d events, %d rounds", len(l), len(tk))
	}
	t.Logf("%d jobs (%d child processes), %d GPUs, %ds rounds, %v window: %d batches applied (%.0f/s of %d/s sent)", jobs, len(children), gpus, round, wall.Round(time.Second), len(l), float64(len(l))/wall.Seconds(), jobs)
	t.Logf("coordinator CPU: %.1f%% of one core (%v CPU in %v)", 100*cpu.Seconds()/wall.Seconds(), cpu.Round(time.Millisecond), wall.Round(time.Millisecond))
	t.Logf("coordinator goroutines' waits for a processor: %s", schedSince(sched))
	if scraper != nil {
		scraper.report(t) // stopped with the window
	}
	t.Logf("job processes CPU: %.1f%% of one core; the machine: %s", 100*jobsCPU.Seconds()/wall.Seconds(), machine)
	if srv.emb != nil {
		t.Logf("connections the flood guard disconnected: %d", srv.emb.FloodDisconnects())
	}
	if n, sum := histogramCount(t, svc.m.carried); n > 0 {
		t.Logf("carried records: %d over the run, %.1f batches each", n, sum/float64(n))
	}
	if n, sum := histogramCount(t, svc.m.carriedRegistrations); n > 0 {
		t.Logf("carried registrations: %d records, %.1f registrations each", n, sum/float64(n))
	}
	rss, peak = memory(t)
	t.Logf("coordinator memory: RSS %d MiB, peak %d MiB; %s", rss>>20, peak>>20, memoryBreakdown())
	if srv.pid != 0 {
		srss, speak := procMemory(t, srv.pid)
		t.Logf("NATS server (its own process): CPU %.1f%% of one core, RSS %d MiB, peak %d MiB", 100*srvCPU.Seconds()/wall.Seconds(), srss>>20, speak>>20)
	}
	t.Logf("event to state: p50 %v, p90 %v, p95 %v, p99 %v, max %v; %.1f%% over 10 ms", pct(l, 50), pct(l, 90), pct(l, 95), pct(l, 99), l[len(l)-1], 100*over(l, 10*time.Millisecond))
	t.Logf("  of which stored in the log to state: p50 %v, p99 %v, max %v", pct(st, 50), pct(st, 99), st[len(st)-1])
	mu.Lock()
	logLateAfterTicks(t, slices.Clone(late), slices.Clone(phases), time.Duration(round)*time.Second, srv.gc)
	mu.Unlock()
	t.Logf("round tick to last lease (measured window): p50 %v, p99 %v, max %v over %d rounds", pct(tk, 50), pct(tk, 99), tk[len(tk)-1], len(tk))
	t.Logf("round tick to last lease (every round with active jobs, the first included): p50 %v, p99 %v, max %v over %d rounds", pct(al, 50), pct(al, 99), al[len(al)-1], len(al))
	mu.Lock()
	t.Logf("jobs granted GPUs in at least one round: %d of %d", len(granted), jobs)
	logRoundPhases(t, slices.Clone(phases))
	logLoopSteps(t, maps.Clone(steps))
	mu.Unlock()
	for _, c := range children {
		_ = c.Process.Kill()
	}
	cancel()
	select {
	case <-stopped:
	case <-time.After(2 * time.Minute):
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
		t.Fatal("the service did not stop within 2 minutes of its context's end (goroutines above)")
	}
	replayLog(t, nc, gpus, svc.Health().LogSeq)
}

// loadNATS is the load test's NATS server: embedded in this process, as
// `shockwave coordinator` runs it by default, or with
// SHOCKWAVE_LOAD_NATS=process in a child process of its own, as in a
// deployment with a separate NATS server (--nats); this process's CPU and
// memory are then the coordinator's alone, and the server's are reported
// apart.
type loadNATS struct {
	url string
	nc  *nats.Conn // the coordinator's connection, with its rights
	pid int        // the server's process, 0 when embedded
	emb *Embedded  // the server when embedded
	gc  *gcLog     // the server process's collections (SHOCKWAVE_LOAD_SERVER_GCTRACE)
}

func startLoadNATS(t *testing.T) *loadNATS {
	dir := t.TempDir()
	if os.Getenv("SHOCKWAVE_LOAD_NATS") != "process" {
		emb, nc := embeddedConn(t, EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:-1", MaxPayload: 8 << 20})
		return &loadNATS{url: emb.ClientURL(), nc: nc, emb: emb}
	}
	c := exec.Command(os.Args[0], "-test.run=^TestLoad_ServerChild$", "-test.timeout=0")
	c.Env = append(os.Environ(), "SHOCKWAVE_LOAD_SERVER="+dir)
	if v := os.Getenv("SHOCKWAVE_LOAD_SERVER_GOGC"); v != "" { // the server's process only
		c.Env = append(c.Env, "GOGC="+v)
	}
	c.Stdout = os.Stderr
	var gc *gcLog
	var gcOut io.Reader
	if os.Getenv("SHOCKWAVE_LOAD_SERVER_GCTRACE") != "" {
		c.Env = append(c.Env, "GODEBUG=gctrace=1")
		var err error
		if gcOut, err = c.StderrPipe(); err != nil {
			t.Fatal(err)
		}
		gc = &gcLog{}
	} else {
		c.Stderr = os.Stderr
	}
	holdStdin(t, c)
	if gc != nil {
		gc.started = time.Now()
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if gc != nil {
		go gc.read(gcOut, os.Stderr)
	}
	t.Cleanup(func() {
		_ = c.Process.Kill()
		_ = c.Wait()
	})
	var url []byte
	eventually(t, 30*time.Second, "the NATS server's process serves", func() bool {
		var err error
		url, err = os.ReadFile(filepath.Join(dir, "url"))
		return err == nil
	})
	secret, err := os.ReadFile(filepath.Join(dir, "auth", coordinatorSecretFile))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(string(url), nats.Token(strings.TrimSpace(string(secret))), nats.Name("shockwave-coordinator"), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return &loadNATS{url: string(url), nc: nc, pid: c.Process.Pid, gc: gc}
}

// cpu is the server's process's CPU time (0 when it is embedded: this
// process's time includes it).
func (s *loadNATS) cpu(t *testing.T) time.Duration {
	if s.pid == 0 {
		return 0
	}
	return procCPU(t, s.pid)
}

// procMemory is a process's resident set now and at its peak, in bytes.
func procMemory(t *testing.T, pid int) (rss, peak int64) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		var kb int64
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &kb); err == nil {
			rss = kb << 10
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &kb); err == nil {
			peak = kb << 10
		}
	}
	return rss, peak
}

// profile writes a CPU profile of the server's process over the window
// into $SHOCKWAVE_LOAD_PROFILE/server-cpu.pprof, when both are set (an
// embedded server's time is in the test's own profile).
func (s *loadNATS) profile(t *testing.T) (stop func()) {
	if s.pid == 0 || os.Getenv("SHOCKWAVE_LOAD_PROFILE") == "" {
		return func() {}
	}
	if err := syscall.Kill(s.pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := syscall.Kill(s.pid, syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the profile's last write
	}
}

// TestLoad_ServerChild is the NATS server's process of the load test
// (SHOCKWAVE_LOAD_NATS=process): the embedded server as the coordinator
// configures it, alone; it writes its URL into the data directory. With
// SHOCKWAVE_LOAD_PROFILE set, SIGUSR1 starts a CPU profile of it and
// SIGUSR2 ends it (loadNATS.profile).
func TestLoad_ServerChild(t *testing.T) {
	dir := os.Getenv("SHOCKWAVE_LOAD_SERVER")
	if dir == "" {
		t.Skip("started by TestLoad_ManyJobsOneEventPerSecond")
	}
	exitWithParent()
	emb, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: "127.0.0.1:-1", MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Shutdown()
	tmp := filepath.Join(dir, "url.tmp")
	if err := os.WriteFile(tmp, []byte(emb.ClientURL()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "url")); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("SHOCKWAVE_LOAD_PROFILE"); dir != "" {
		sig := make(chan os.Signal, 2)
		ossignal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
		var f *os.File
		for s := range sig {
			if s == syscall.SIGUSR2 {
				pprof.StopCPUProfile()
				_ = f.Close()
				writeServerMemory(t, dir)
				continue
			}
			var err error
			f, err = os.Create(filepath.Join(dir, "server-cpu.pprof"))
			if err != nil {
				t.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {} // until this process's parent goes away (exitWithParent)
}

// writeHeap writes this process's heap profile to path.
func writeHeap(t *testing.T, path string) {
	h, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := pprof.WriteHeapProfile(h); err != nil {
		t.Fatal(err)
	}
}

// writeServerMemory writes the server's process's heap profile and a line
// of its memory statistics (server-heap.pprof, server-mem.txt) into dir.
func writeServerMemory(t *testing.T, dir string) {
	writeHeap(t, filepath.Join(dir, "server-heap.pprof"))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	line := fmt.Sprintf("heap in use %d MiB, stacks %d MiB, goroutines %d, collections %d, GC CPU %.1f%%\n",
		ms.HeapInuse>>20, ms.StackInuse>>20, runtime.NumGoroutine(), ms.NumGC, 100*ms.GCCPUFraction)
	if err := os.WriteFile(filepath.Join(dir, "server-mem.txt"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
}

// replayLog measures how long a restarted coordinator takes to replay the
// log the load left.
func replayLog(t *testing.T, nc *nats.Conn, gpus int, records uint64) {
	cfg := ServiceConfig{Core: loadCore(gpus, envInt("SHOCKWAVE_LOAD_ROUND", 5)), Policy: "shockwave"}
	loadPolicyConfig(&cfg) // the log's, or the replay refuses it
	svc, err := NewService(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	eventually(t, 10*time.Minute, "the replay", func() bool {
		select {
		case err := <-ran: // refused the log (a configuration other than its own)
			t.Fatalf("the replay ended: %v", err)
		default:
		}
		return svc.Health().OK
	})
	took := time.Since(start)
	t.Logf("restart: replayed %d log records in %v (%.0f records/s)", records, took.Round(time.Millisecond), float64(records)/took.Seconds())
}

// leaseKinds counts a round's RUN leases that extend the job's grant, the
// other RUN leases, and the SUSPEND leases.
func leaseKinds(ls []protocol.Lease) (kept, started, suspended int) {
	for _, l := range ls {
		switch {
		case l.Action == protocol.Run && l.Extension:
			kept++
		case l.Action == protocol.Run:
			started++
		case l.Action == protocol.Suspend:
			suspended++
		}
	}
	return kept, started, suspended
}

// logRoundPhases reports how tick → last lease splits (roundTimes) over
// the rounds with active jobs, the first included.
func logRoundPhases(t *testing.T, rounds []roundTimes) {
	parts := []struct {
		name string
		of   func(r roundTimes) time.Duration
	}{
		{"tick record's trip through the log", func(r roundTimes) time.Duration { return r.Opened.Sub(r.Fired) }},
		{"the round opened to its solve's goroutine running", func(r roundTimes) time.Duration { return r.SolveBegan.Sub(r.Opened) }},
		{"solve (the policy's Admit and Allocate)", func(r roundTimes) time.Duration { return r.Solve }},
		{"  of which the held calls and the admissions", func(r roundTimes) time.Duration { return r.Admitted }},
		{"solve's end to the plan record appended", func(r roundTimes) time.Duration { return r.PlanAsked.Sub(r.SolveBegan) - r.Solve }},
		{"plan record's trip through the log", func(r roundTimes) time.Duration { return r.PlanBack.Sub(r.PlanAsked) }},
		{"close on the loop (placement, leases, held records)", func(r roundTimes) time.Duration { return r.Closed.Sub(r.PlanBack) }},
		{"publishing the leases and the flush", func(r roundTimes) time.Duration { return r.Published.Sub(r.Closed) }},
		{"  of which building the nodes' desired states", func(r roundTimes) time.Duration { return r.Queued.Sub(r.Closed) }},
		{"  of which the shards sending", func(r roundTimes) time.Duration { return r.Sent.Sub(r.Queued) }},
		{"  of which the flush", func(r roundTimes) time.Duration { return r.Published.Sub(r.Sent) }},
	}
	for _, p := range parts {
		ds := make([]time.Duration, len(rounds))
		for i, r := range rounds {
			ds[i] = p.of(r)
		}
		slices.Sort(ds)
		t.Logf("  %s: p50 %v, p99 %v, max %v", p.name, pct(ds, 50), pct(ds, 99), ds[len(ds)-1])
	}
}

// logLoopSteps reports how long the loop's steps held it, by kind, over
// the measured window.
func logLoopSteps(t *testing.T, steps map[string][]time.Duration) {
	for _, k := range slices.Sorted(maps.Keys(steps)) {
		ds := steps[k]
		slices.Sort(ds)
		var sum time.Duration
		over := 0
		for _, d := range ds {
			sum += d
			if d > 10*time.Millisecond {
				over++
			}
		}
		t.Logf("loop step %s: %d, total %v, p50 %v, p99 %v, max %v, %d over 10 ms", k, len(ds), sum.Round(time.Millisecond), pct(ds, 50), pct(ds, 99), ds[len(ds)-1], over)
	}
}

// over is the share of durations above d.
func over(s []time.Duration, d time.Duration) float64 {
	n := 0
	for _, x := range s {
		if x > d {
			n++
		}
	}
	return float64(n) / float64(len(s))
}

// pct is the nearest-rank percentile p of sorted s.
func pct(s []time.Duration, p int) time.Duration { return s[(len(s)*p+99)/100-1] }

// loadCore is the coordinator's configuration: the flat pool up to 1,024
// GPUs (a node's limit), nodes of 8 GPUs beyond.
func loadCore(gpus, round int) Config {
	if loadAgentsMode() { // the nodes are the agents' (load_agents_test.go)
		return Config{Dynamic: true, RoundSeconds: float64(round)}
	}
	c := Config{GPUs: gpus, RoundSeconds: float64(round)}
	if gpus > 1024 && gpus%8 == 0 {
		c.Cluster = topology.Uniform(gpus/8, 8)
	}
	return c
}

// loadPolicyConfig sets cfg's Shockwave configuration from
// SHOCKWAVE_LOAD_POLICY_CONFIG, as `coordinator --config` gives it, and
// reports whether there was one.
func loadPolicyConfig(cfg *ServiceConfig) bool {
	v := os.Getenv("SHOCKWAVE_LOAD_POLICY_CONFIG")
	if v != "" {
		cfg.PolicyOptions.Config = json.RawMessage(v)
	}
	return v != ""
}

// loadJobsListed counts the load's jobs in a status reply (not the
// history phase's).
func loadJobsListed(r *protocol.StatusReply) int {
	n := 0
	for _, j := range r.Jobs {
		if !strings.HasPrefix(j.Job, loadHistoryPrefix) {
			n++
		}
	}
	return n
}

// loadJobsPerProc is the most jobs one child process of the load test runs.
const loadJobsPerProc = 2500

// loadShape is the test's jobs and GPUs: the SHOCKWAVE_LOAD=10k preset or
// 2,000 on 512, either changed by SHOCKWAVE_LOAD_JOBS and _GPUS.
func loadShape() (jobs, gpus int) {
	jobs, gpus = 2000, 512
	if os.Getenv("SHOCKWAVE_LOAD") == "10k" {
		jobs, gpus = 10000, 2560
	}
	return envInt("SHOCKWAVE_LOAD_JOBS", jobs), envInt("SHOCKWAVE_LOAD_GPUS", gpus)
}

// startLoadChildren starts procs child processes that run jobs jobs
// between them, each its contiguous share of the ids; the channel says why
// each ended, once it did (they are killed at the end).
func startLoadChildren(t *testing.T, url string, jobs, procs int) (children []*exec.Cmd, exited <-chan error) {
	procs = max(1, min(procs, jobs))
	var out []*exec.Cmd
	ended := make(chan error, procs)
	for p := range procs {
		lo, hi := p*jobs/procs, (p+1)*jobs/procs
		c := loadClusterChild(t, "TestLoad_JobsChild")
		c.Env = append(os.Environ(), "SHOCKWAVE_LOAD_CHILD="+url,
			fmt.Sprintf("SHOCKWAVE_LOAD_JOBS=%d", jobs), fmt.Sprintf("SHOCKWAVE_LOAD_RANGE=%d-%d", lo, hi))
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		holdStdin(t, c)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { ended <- fmt.Errorf("job process %d: %v", c.Process.Pid, c.Wait()) }()
		out = append(out, c)
	}
	return out, ended
}

// loadClusterChild is a child process of the emulated cluster (jobs, or
// node agents and their processes): this test binary running test run.
// With SHOCKWAVE_LOAD_NICE=N it runs at niceness N, through nice(1) so that
// every thread of it does: the cluster then takes the cores only when the
// coordinator leaves them, as if the coordinator had a machine of its own.
func loadClusterChild(t *testing.T, run string) *exec.Cmd {
	args := []string{"-test.run=^" + run + "$", "-test.timeout=0"}
	n := os.Getenv("SHOCKWAVE_LOAD_NICE")
	if n == "" {
		return exec.Command(os.Args[0], args...)
	}
	if v, err := strconv.Atoi(n); err != nil || v < 0 || v > 19 {
		t.Fatalf("SHOCKWAVE_LOAD_NICE=%q: want a niceness from 0 to 19", n)
	}
	nice, err := exec.LookPath("nice")
	if err != nil {
		t.Fatalf("SHOCKWAVE_LOAD_NICE needs nice(1): %v", err)
	}
	return exec.Command(nice, append([]string{"-n", n, os.Args[0]}, args...)...)
}

// memory is this process's resident set now and at its peak, in bytes.
func memory(t *testing.T) (rss, peak int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	peak = ru.Maxrss << 10
	raw, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return peak, peak // no procfs: report the peak for both
	}
	var size, pages int64
	if _, err := fmt.Sscan(string(raw), &size, &pages); err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize()), peak
}

// cpuTime is the user+system CPU time of this process.
func cpuTime(t testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestLoad_JobsChild is the jobs' process of the load test.
func TestLoad_JobsChild(t *testing.T) {
	url := os.Getenv("SHOCKWAVE_LOAD_CHILD")
	if url == "" {
		t.Skip("started by TestLoad_ManyJobsOneEventPerSecond")
	}
	exitWithParent()
	n := envInt("SHOCKWAVE_LOAD_JOBS", 2000)
	lo, hi := 0, n
	if r := os.Getenv("SHOCKWAVE_LOAD_RANGE"); r != "" {
		if _, err := fmt.Sscanf(r, "%d-%d", &lo, &hi); err != nil || lo < 0 || hi > n || lo >= hi {
			t.Fatalf("SHOCKWAVE_LOAD_RANGE=%q: want LO-HI within 0-%d", r, n)
		}
	}
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	var wg sync.WaitGroup
	for i := lo; i < hi; i++ {
		id := fmt.Sprintf("job-%04d", i)
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { loadJob(t, nc, subj, id, 1+i%2, time.Duration(i)*time.Second/time.Duration(n)) })
	}
	wg.Wait()
}

// loadJob registers, then sends one batch a second, with a flush round
// trip every 30th as the SDK's: progress while it holds a RUN lease, a
// heartbeat otherwise.
func loadJob(t *testing.T, nc *nats.Conn, subj protocol.Subjects, id string, workers int, phase time.Duration) {
	var running sync.Map
	if _, err := nc.Subscribe(subj.Lease(id), func(m *nats.Msg) {
		if l, err := protocol.DecodeLease(m.Data, 0); err == nil {
			running.Store(id, l.Action == protocol.Run)
		}
	}); err != nil {
		t.Error(err)
		return
	}
	r := newJob(id, workers)
	data, _ := json.Marshal(r)
	for {
		if _, err := nc.Request(subj.Register(), data, 10*time.Second); err == nil {
			break
		}
	}
	time.Sleep(phase)
	tick := time.NewTicker(time.Second)
	var seq uint64
	var done int64
	for range tick.C {
		seq++
		run, _ := running.Load(id)
		var m *nats.Msg
		m, done = loadBatch(subj.Events(id), id, seq, done, r.TotalSteps, run == true)
		if err := nc.PublishMsg(m); err != nil {
			return
		}
		// As the SDK does (sdk/events.go): published batches are
		// confirmed by a flush round trip once the oldest is 30
		// sampling intervals (here 30 batches) old.
		if seq%30 == 0 {
			_ = nc.FlushTimeout(10 * time.Second)
		}
	}
}

// startLoadProfile writes a CPU profile of the measured window and a heap
// profile at its end into $SHOCKWAVE_LOAD_PROFILE (a directory), when set;
// with SHOCKWAVE_LOAD_TRACE=S also an execution trace of the window's
// first S seconds (trace.out: where goroutines wait, which a CPU profile
// does not show).
func startLoadProfile(t *testing.T) (stop func()) {
	dir := os.Getenv("SHOCKWAVE_LOAD_PROFILE")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	stopTrace := startLoadTrace(t, dir)
	return func() {
		stopTrace()
		pprof.StopCPUProfile()
		_ = f.Close()
		runtime.GC()
		writeHeap(t, filepath.Join(dir, "heap.pprof"))
	}
}

// startLoadTrace writes an execution trace of the first
// $SHOCKWAVE_LOAD_TRACE seconds of the window into dir, when set.
func startLoadTrace(t *testing.T, dir string) (stop func()) {
	secs := envInt("SHOCKWAVE_LOAD_TRACE", 0)
	if secs == 0 {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, "trace.out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Start(f); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end := func() { once.Do(func() { trace.Stop(); _ = f.Close() }) }
	timer := time.AfterFunc(time.Duration(secs)*time.Second, end)
	return func() { timer.Stop(); end() }
}

// logLateAfterTicks says when, after the latest round's tick, the batches
// over 10 ms were sent: bunched right after the ticks, they wait on the
// rounds' work; spread evenly, on something else. The first second is cut
// into tenths.
func logLateAfterTicks(t *testing.T, late []time.Time, phases []roundTimes, round time.Duration, gc *gcLog) {
	if len(late) == 0 || len(phases) == 0 {
		return
	}
	edges := []time.Duration{}
	for d := 100 * time.Millisecond; d < time.Second; d += 100 * time.Millisecond {
		edges = append(edges, d)
	}
	edges = append(edges, time.Second, round/2, round)
	n := make([]int, len(edges)+1) // the last: before any tick
	for _, at := range late {
		i := len(edges)
		for _, p := range phases {
			if !p.Fired.After(at) {
				d := at.Sub(p.Fired)
				i = len(edges) - 1
				for k, e := range edges {
					if d < e {
						i = k
						break
					}
				}
			}
		}
		n[i]++
	}
	var b strings.Builder
	from := time.Duration(0)
	for k, e := range edges {
		fmt.Fprintf(&b, " %.1f–%.1fs %.0f%%;", from.Seconds(), e.Seconds(), 100*float64(n[k])/float64(len(late)))
		from = e
	}
	t.Logf("  batches over 10 ms by when they were sent after the round's tick:%s before the first tick %d", b.String(), n[len(edges)])
	// the tenths of a second with the most of them
	by := map[time.Time]int{}
	for _, at := range late {
		by[at.Truncate(100*time.Millisecond)]++
	}
	slots := slices.SortedFunc(maps.Keys(by), func(a, b time.Time) int { return by[b] - by[a] })
	b.Reset()
	for _, at := range slots[:min(8, len(slots))] {
		fmt.Fprintf(&b, " %s: %d%s;", at.Format("15:04:05.0"), by[at], gc.describe(at))
	}
	t.Logf("  the busiest tenths of a second:%s", b.String())
	if gc != nil {
		t.Logf("  %s", gc.summary(phases[0].Fired, late[len(late)-1]))
	}
}

// loadBatch is a load-test job's batch of second seq on subject: progress
// of 100 steps while it runs (done counts them), a heartbeat otherwise,
// stamped with when it was sent (hdrSent).
func loadBatch(subject, id string, seq uint64, done, total int64, running bool) (*nats.Msg, int64) {
	ev := heartbeat(seq, done)
	if running {
		done += 100
		ev = progress(seq, 100, done, 1)
	}
	ev.V, ev.Job, ev.TotalSteps = protocol.Version, id, total
	m := nats.NewMsg(subject)
	m.Data, _ = json.Marshal(protocol.Batch{V: protocol.Version, Job: id, Events: []protocol.Event{ev}})
	m.Header.Set(hdrSent, strconv.FormatInt(time.Now().UnixNano(), 10))
	return m, done
}

// histogramCount reads a histogram's count and sum.
func histogramCount(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}
