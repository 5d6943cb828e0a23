package sdk

import (
	"math"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

func TestPace_AllowsTheBurstThenTheRate(t *testing.T) {
	var p pace
	t0 := time.Unix(1000, 0)
	if k, w := p.allow(t0, 5000, false); k != paceBurst || w != 0 {
		t.Fatalf("first publication: %d allowed (wait %v), want the burst %d", k, w, paceBurst)
	}
	p.spend(paceBurst, false)
	k, w := p.allow(t0, 256, false)
	if k != 0 || w <= 0 {
		t.Fatalf("with the budget spent: %d allowed, wait %v; want none and a wait", k, w)
	}
	// The wait is for paceMin events at paceRate.
	if want := time.Duration(float64(paceMin) / paceRate * float64(time.Second)); w < want || w > want+2*time.Millisecond {
		t.Errorf("wait %v, want about %v", w, want)
	}
	if k, _ := p.allow(t0.Add(w), 256, false); k < paceMin || k > paceMin+1 {
		t.Errorf("after the wait: %d allowed, want %d", k, paceMin)
	}
	// A small publication goes out whole, a large one as far as the budget
	// goes; a failed one gives its events back.
	p = pace{}
	p.allow(t0, 1, false)
	p.spend(paceBurst-3, false)
	if k, _ := p.allow(t0, 2, false); k != 2 {
		t.Errorf("2 events with 3 left: %d allowed", k)
	}
	p.spend(-100, false)
	if k, _ := p.allow(t0, 500, false); k != 103 {
		t.Errorf("after 100 given back: %d allowed, want 103", k)
	}
	// The copies stay under the budgets.
	if paceRate >= protocol.EventRate || paceBurst >= protocol.EventBurst || paceMin < 1 {
		t.Errorf("pace %d/s, burst %d, min %d against the coordinator's %d/s, %d", paceRate, paceBurst, paceMin, protocol.EventRate, protocol.EventBurst)
	}
	if paceLineRate >= protocol.UplinkLineRate || paceLineBurst >= protocol.UplinkLineBurst || paceLineRate < 1 {
		t.Errorf("pace %d lines/s, burst %d against the agent's %d/s, %d", paceLineRate, paceLineBurst, protocol.UplinkLineRate, protocol.UplinkLineBurst)
	}
}

// Through an agent, each batch is a line, and the agent forwards a
// process's lines at a rate of its own: batches wait for it even with
// events to spare, and only there.
func TestPace_BatchesThroughAnAgentKeepToItsLineRate(t *testing.T) {
	var p pace
	t0 := time.Unix(1000, 0)
	for i := range paceLineBurst {
		k, w := p.allow(t0, 1, true)
		if k != 1 || w != 0 {
			t.Fatalf("line %d of the burst: %d allowed, wait %v", i, k, w)
		}
		p.spend(1, true)
	}
	k, w := p.allow(t0, 1, true)
	if want := time.Second / paceLineRate; k != 0 || w < want || w > want+2*time.Millisecond {
		t.Fatalf("past the line burst: %d allowed, wait %v; want none and about %v", k, w, want)
	}
	if k, w := p.allow(t0, 1, false); k != 1 || w != 0 {
		t.Errorf("over NATS the same batch waits for nothing: %d allowed, wait %v", k, w)
	}
	p.spend(-1, true)
	if k, _ := p.allow(t0, 1, true); k != 1 {
		t.Errorf("a failed line given back: %d allowed", k)
	}
}

// newQueueJob is a job whose events stay in its queue (nothing sends them).
func newQueueJob(buffer int) *Job {
	j := &Job{id: "q"}
	j.o.buffer, j.o.samples = buffer, 1<<40
	j.ev.init(&j.o)
	j.batch.Store(8)
	return j
}

func (j *Job) stepsFor(n int64, d time.Duration) {
	j.steps.Add(n)
	j.elapsed.Add(int64(d))
	j.ev.sample(j, false)
}

func TestEvents_BatchSizeChangesWithNoStepBetweenKeepOnlyTheLast(t *testing.T) {
	j := newQueueJob(64)
	j.stepsFor(3, 30*time.Millisecond)
	for _, bs := range []int{16, 32, 48} {
		if err := j.SetBatchSize(bs); err != nil {
			t.Fatal(err)
		}
	}
	q := j.ev.queue
	if len(q) != 2 || q[1].ev.Type != protocol.EventBatchSize || q[1].ev.BatchSize != 48 || q[1].ev.Seq != 4 {
		t.Fatalf("queue %+v: want the progress and one batch-size event (48, seq 4)", q)
	}
	// One already published is not rewritten: the next change follows it.
	j.ev.inflight = q[1].ev.Seq
	if err := j.SetBatchSize(64); err != nil {
		t.Fatal(err)
	}
	if q := j.ev.queue; len(q) != 3 || q[1].ev.BatchSize != 48 || q[2].ev.BatchSize != 64 {
		t.Fatalf("queue %+v: the published change was rewritten", q)
	}
}

// A size changed faster than the samples (progress, change, progress,
// change, ...) past the queue's bound drops the older changes and merges
// their progress forward: no step or second is lost, the last size and
// the cumulative counters stand, and a published event is never touched.
func TestEvents_AQueueOfFastSizeChangesStaysBoundedAndLosesNoStepOrSecond(t *testing.T) {
	j := newQueueJob(32)
	j.stepsFor(1, time.Millisecond)
	j.ev.inflight = j.ev.queue[0].ev.Seq
	published := j.ev.queue[0].ev
	var steps int64 = 1
	var elapsed time.Duration = time.Millisecond
	for i := range 500 {
		j.stepsFor(2, 3*time.Millisecond)
		steps, elapsed = steps+2, elapsed+3*time.Millisecond
		if err := j.SetBatchSize(8 * (2 + i%3)); err != nil {
			t.Fatal(err)
		}
	}
	j.stepsFor(1, time.Millisecond)
	steps, elapsed = steps+1, elapsed+time.Millisecond
	q := j.ev.queue
	if len(q) > 33 {
		t.Fatalf("%d events queued, bound 32", len(q))
	}
	if q[0].ev != published {
		t.Errorf("the published event changed: %+v, was %+v", q[0].ev, published)
	}
	var gotSteps int64
	var gotElapsed float64
	last := map[protocol.EventType]protocol.Event{}
	for i, e := range q {
		gotSteps += e.ev.Steps
		gotElapsed += e.ev.Elapsed
		last[e.ev.Type] = e.ev
		if i > 0 && e.ev.Seq <= q[i-1].ev.Seq {
			t.Fatalf("seq %d after %d", e.ev.Seq, q[i-1].ev.Seq)
		}
	}
	if gotSteps != steps || math.Abs(gotElapsed-elapsed.Seconds()) > 1e-9 {
		t.Errorf("queued %d steps in %v s, recorded %d in %v", gotSteps, gotElapsed, steps, elapsed.Seconds())
	}
	end := q[len(q)-1].ev
	if end.Type != protocol.EventProgress || end.StepsDone != steps || end.BatchSize != j.BatchSize() {
		t.Errorf("last event %+v: want progress at %d steps, batch size %d", end, steps, j.BatchSize())
	}
	if b := last[protocol.EventBatchSize]; b.BatchSize != j.BatchSize() {
		t.Errorf("last batch-size event says %d, the size is %d", b.BatchSize, j.BatchSize())
	}
}

// A job ending epochs faster than it may send them (an outage, or a spent
// budget) fills the buffer with epoch ends. Samples merge first; epoch ends
// merge only once nothing else can, so the buffer stays within its bound
// and the steps, the seconds and the last epoch all arrive.
func TestEvents_EpochEndsMergeOnlyWhenNothingElseCan(t *testing.T) {
	j := newQueueJob(16)
	for range 8 {
		j.steps.Add(2)
		j.elapsed.Add(int64(2 * time.Millisecond))
		j.EndEpoch()
	}
	for range 12 {
		j.stepsFor(1, time.Millisecond) // samples of epoch 8
	}
	epochEnds := func() int {
		n := 0
		for _, e := range j.ev.queue {
			if e.boundary && e.ev.Type == protocol.EventProgress {
				n++
			}
		}
		return n
	}
	if n := epochEnds(); n != 8 || len(j.ev.queue) > 17 {
		t.Fatalf("%d events, %d epoch ends; want every epoch end kept while samples could merge", len(j.ev.queue), n)
	}
	for range 1000 {
		j.steps.Add(2)
		j.elapsed.Add(int64(2 * time.Millisecond))
		j.EndEpoch()
	}
	q := j.ev.queue
	if len(q) > 17 {
		t.Fatalf("%d events queued, bound 16", len(q))
	}
	var steps int64
	var elapsed float64
	for _, e := range q {
		steps += e.ev.Steps
		elapsed += e.ev.Elapsed
	}
	if want := int64(12 + 2*1008); steps != want || math.Abs(elapsed-float64(want)*1e-3) > 1e-9 {
		t.Errorf("queued %d steps in %v s, want %d in %v", steps, elapsed, want, float64(want)*1e-3)
	}
	if last := q[len(q)-1].ev; last.Epoch != 1008 || last.StepsDone != 12+2*1008 {
		t.Errorf("last event at epoch %d, %d steps; want 1008, %d", last.Epoch, last.StepsDone, 12+2*1008)
	}
}
