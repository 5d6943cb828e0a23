package coordinator

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The load test's history phase (SHOCKWAVE_LOAD_HISTORY=N): before the
// load's jobs register, N jobs of their model run to completion through the
// coordinator, so that the load meets a forecaster whose families know the
// model's epochs, as a cluster that has run for a while does. Without it
// every forecast reads family rows for a few epochs only; with it each one
// walks its job's remaining epochs through them (docs/scale.md, session 23,
// measured the cost in BenchmarkShockwaveLive_MatureFamilies_*).
//
// The history jobs mirror that benchmark's teachHistory: ResNet-18 jobs of
// the load's shape (batch size 32, 50,000 samples, 1,000,000 steps: 640
// epochs), every second one gns, doubling its batch size after its second
// and fourth epochs. Each is a goroutine of this process with a NATS
// connection of its own, registering as a job does; at each RUN lease (one a
// round) it reports its next stretch of progress, so that every batch size
// it used is seen by a round, and after its last stretch it reports done.
// The phase ends when every history job has completed.

// loadHistory is how many history jobs run before the load (0: none).
func loadHistory() int { return envInt("SHOCKWAVE_LOAD_HISTORY", 0) }

// loadHistoryPrefix names the history jobs; the load's are job-NNNN.
const loadHistoryPrefix = "history-"

// historyStretch is one round's report of a history job: its batch size,
// steps done and total (counted at that batch size) and epochs done.
type historyStretch struct {
	bs          int
	done, total int64
	epoch       int
}

// historyStretches is job k's progress, one stretch a round (the
// observations of teachHistory).
func historyStretches(k int) []historyStretch {
	const samples, total = 50000, int64(1_000_000)
	if k%2 == 0 {
		return []historyStretch{{32, total, total, 640}}
	}
	return []historyStretch{
		{32, 2 * samples / 32, total, 2},
		{64, samples / 32, total / 2, 2}, // the same two epochs, recounted at 64
		{64, 4 * samples / 64, total / 2, 4},
		{128, samples / 64, total / 4, 4},
		{128, total / 4, total / 4, 640},
	}
}

// runLoadHistory runs n history jobs against the coordinator at url and
// waits until the coordinator has completed every one (bounded).
func runLoadHistory(t *testing.T, nc *nats.Conn, url string, n int) {
	if n <= 0 {
		return
	}
	start := time.Now()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() { errs <- historyJob(url, subj, k) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("history phase: %v", err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		completed := 0
		for _, j := range status(t, nc, subj).Jobs {
			if strings.HasPrefix(j.Job, loadHistoryPrefix) && j.State == "completed" {
				completed++
			}
		}
		if completed == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history phase: %d of %d history jobs completed a minute after the last reported done", completed, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("history phase: %d jobs of the load's model completed in %v", n, time.Since(start).Round(time.Millisecond))
}

// historyJob runs history job k to its done event; bounded by 20 rounds'
// worth of leases.
func historyJob(url string, subj protocol.Subjects, k int) error {
	id := fmt.Sprintf("%s%d", loadHistoryPrefix, k)
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	leases := make(chan protocol.Lease, 64)
	if _, err := nc.Subscribe(subj.Lease(id), func(m *nats.Msg) {
		if l, err := protocol.DecodeLease(m.Data, 0); err == nil {
			select {
			case leases <- *l:
			default:
			}
		}
	}); err != nil {
		return err
	}
	r := newJob(id, 1+k%2)
	if k%2 == 1 {
		r.Mode = "gns"
	}
	data, _ := json.Marshal(r)
	if _, err := nc.Request(subj.Register(), data, 10*time.Second); err != nil {
		return fmt.Errorf("%s: register: %w", id, err)
	}
	var seq uint64
	var done int64
	publish := func(ev protocol.Event) error {
		seq++
		ev.V, ev.Job, ev.Seq = protocol.Version, id, seq
		data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: id, Events: []protocol.Event{ev}})
		if err := nc.Publish(subj.Events(id), data); err != nil {
			return err
		}
		return nc.Flush()
	}
	stretches := historyStretches(k)
	timeout := time.After(time.Duration(20*envInt("SHOCKWAVE_LOAD_ROUND", 5)) * time.Second)
	for next := 0; next <= len(stretches); {
		select {
		case l := <-leases:
			if l.Action != protocol.Run {
				continue
			}
		case <-timeout:
			return fmt.Errorf("%s: %d of %d stretches reported in 20 rounds", id, next, len(stretches))
		}
		if next == len(stretches) {
			return publish(protocol.Event{Type: protocol.EventDone})
		}
		s := stretches[next]
		steps := s.done - done // a recount runs one step at the new size
		if steps <= 0 {
			steps = 1
		}
		done = s.done
		err := publish(protocol.Event{Type: protocol.EventProgress, Steps: steps, Elapsed: float64(steps) / 10,
			StepsDone: s.done, TotalSteps: s.total, Epoch: s.epoch, BatchSize: s.bs, Throughput: 10})
		if err != nil {
			return err
		}
		next++
	}
	return nil
}

// waitLoadGate waits, in an agents' child of a run with a history phase,
// until the file SHOCKWAVE_LOAD_GATE names exists: the agents join first,
// so that the history jobs have nodes to run on, and register their
// residents once the phase has ended.
func waitLoadGate() {
	path := os.Getenv("SHOCKWAVE_LOAD_GATE")
	if path == "" {
		return
	}
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logForecastPriors reports which prior the plan's forecasts of the load's
// jobs leaned on: with a history phase, the families; without, the jobs'
// weak priors.
func logForecastPriors(t *testing.T, r *protocol.StatusReply) {
	if r.Plan == nil {
		t.Logf("forecast priors: no plan in the status reply")
		return
	}
	priors := map[string]int{}
	for _, e := range r.Plan.Explain {
		if !strings.HasPrefix(e.Job, loadHistoryPrefix) {
			priors[e.ForecastPrior]++
		}
	}
	t.Logf("forecast priors of the load's jobs in the plan: %v", priors)
}
