package coordinator

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// history synthesizes a coordinator's log deterministically: a
// configuration record, registrations (some late, one repeated), and per
// round the event batches of every job — progress with a measured
// throughput for the jobs the fold last gave a RUN lease, heartbeats for
// the others, batch-size doublings of the gns jobs, a job that finishes,
// one that falls silent and comes back, a rejected out-of-order event —
// then the tick. It drives a fold as it writes, so the events follow the
// leases like real SDKs'.
type history struct {
	t       testing.TB
	subj    protocol.Subjects
	f       *fold
	rng     *rand.Rand
	records []record
	now     time.Time
	jobs    []*synthJob
	onApply func(i int, r record, o *outcome)
	// resident, when set, is the node every fifth job's process lives on;
	// members changes the cluster after the record of a given index
	// (node agents joining and leaving: not log records, so a replay
	// applies them at the same index).
	resident string
	members  map[int][]func(*Core) error
}

type synthJob struct {
	reg        protocol.Register
	seq        uint64
	done       int64
	total      int64
	batch      int
	epoch      int
	finished   bool
	silentFrom int // the job sends nothing in rounds [silentFrom, silentFrom+silentFor)
	silentFor  int
}

// historyConfig is the Core configuration of synthetic histories, with
// defaults filled in as a service fills them.
func historyConfig(gpus int) Config {
	cfg := Config{GPUs: gpus, RoundSeconds: 60, JobTimeoutSeconds: 150, LeaseGraceSeconds: 15, ExpireLeases: true}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return cfg
}

// newHistory starts a log for policy name (with its options) on gpus GPUs.
func newHistory(t testing.TB, name string, opts policy.Options, gpus int, seed uint64) *history {
	return newHistoryOn(t, name, opts, historyConfig(gpus), seed)
}

// newHistoryOn starts a log with the Core configuration cfg.
func newHistoryOn(t testing.TB, name string, opts policy.Options, cfg Config, seed uint64) *history {
	h := &history{t: t, subj: protocol.Subjects{Prefix: protocol.DefaultPrefix},
		rng: rand.New(rand.NewPCG(seed, 11)), now: time.Unix(1_700_000_000, 0), members: map[int][]func(*Core) error{}}
	h.f = newFold(h.subj, protocol.DefaultMaxMessageBytes)
	rec, err := newConfigRecord(cfg, name, opts)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(rec)
	h.append(h.subj.Prefix+"."+logConfig, nil, data)
	return h
}

// append folds one record and keeps it.
func (h *history) append(subject string, hdr nats.Header, data []byte) outcome {
	h.now = h.now.Add(time.Duration(10+h.rng.IntN(90)) * time.Millisecond)
	r := record{Seq: uint64(len(h.records) + 1), Time: h.now, Subject: subject, Header: hdr, Data: data}
	h.records = append(h.records, r)
	o := h.f.apply(r)
	h.changeMembers(h.f.core, len(h.records)-1)
	if h.onApply != nil {
		h.onApply(len(h.records)-1, r, &o)
	}
	return o
}

// changeMembers applies the membership changes due after record i.
func (h *history) changeMembers(c *Core, i int) {
	for _, op := range h.members[i] {
		if err := op(c); err != nil {
			h.t.Fatalf("membership change after record %d: %v", i+1, err)
		}
	}
}

// at schedules a membership change after the next record.
func (h *history) at(op func(*Core) error) {
	h.members[len(h.records)] = append(h.members[len(h.records)], op)
}

var synthModels = []struct {
	model, mode string
	thr         float64
}{{"ResNet-18", "static", 12}, {"ResNet-50", "gns", 6}, {"Transformer", "accordion", 9}, {"LM", "gns", 4}}

// register adds job number i.
func (h *history) register(i int) {
	m := synthModels[i%len(synthModels)]
	workers := []int{1, 1, 2, 1, 4, 2}[i%6]
	reg := protocol.Register{V: protocol.Version, Job: fmt.Sprintf("job-%03d", i), Model: m.model, Mode: m.mode,
		Workers: workers, BatchSize: 32, DatasetSize: 3200 + 320*(i%5), TotalSteps: int64(4000 + 700*(i%7)),
		Throughput: m.thr, IsolatedSeconds: float64(4000+700*(i%7)) / m.thr}
	if h.resident != "" && i%5 == 2 {
		reg.Node = h.resident
	}
	j := &synthJob{reg: reg, total: reg.TotalSteps, batch: 32, silentFrom: -1}
	if i%7 == 3 {
		j.silentFrom, j.silentFor = 6+i%5, 4 // longer than the job timeout: lost, then back
	}
	h.jobs = append(h.jobs, j)
	h.registerAgain(j)
}

func (h *history) registerAgain(j *synthJob) {
	data, _ := json.Marshal(j.reg)
	h.append(h.subj.Prefix+"."+logRegister, nats.Header{hdrReply: []string{"_INBOX.reply"}}, data)
}

// round writes one round: every job's events, then the tick.
func (h *history) round(k int) {
	running := map[string]bool{}
	for id, l := range h.f.leases {
		running[id] = l.Action == protocol.Run
	}
	for _, j := range h.jobs {
		if j.finished || (k >= j.silentFrom && k < j.silentFrom+j.silentFor) {
			continue
		}
		h.events(j, running[j.reg.Job], k)
	}
	if k%9 == 4 && len(h.jobs) > 0 { // an SDK restart: the same registration again
		h.registerAgain(h.jobs[k%len(h.jobs)])
	}
	round := h.f.core.NextRound()
	data, _ := json.Marshal(tickRecord{V: protocol.Version, Round: round, Open: true})
	h.now = h.now.Add(60 * time.Second)
	h.append(h.subj.Prefix+"."+logTick, nil, data)
	if k%3 == 1 {
		// While the round solves: heartbeats folded at once, an SDK
		// restart's registration held until the round closes.
		for _, j := range h.jobs[:min(3, len(h.jobs))] {
			if !j.finished && (k < j.silentFrom || k >= j.silentFrom+j.silentFor) {
				h.events(j, false, k)
			}
		}
		if len(h.jobs) > 1 {
			h.registerAgain(h.jobs[1])
		}
	}
	h.plan(round)
}

// plan appends the plan record that closes round.
func (h *history) plan(round int) outcome {
	data, _ := json.Marshal(planRecord{V: protocol.Version, Round: round})
	return h.append(h.subj.Prefix+"."+logPlan, nil, data)
}

func (h *history) events(j *synthJob, running bool, k int) {
	var evs []protocol.Event
	next := func(e protocol.Event) {
		j.seq++
		e.V, e.Job, e.Seq = protocol.Version, j.reg.Job, j.seq
		e.StepsDone, e.TotalSteps, e.Epoch, e.BatchSize = j.done, j.total, j.epoch, j.batch
		evs = append(evs, e)
	}
	if !running {
		next(protocol.Event{Type: protocol.EventProgress})
	} else {
		thr := synthModels[indexOf(j.reg.Model)].thr * float64(j.batch) / 32 * (0.9 + 0.2*h.rng.Float64())
		steps := int64(thr * 55)
		j.done = min(j.done+steps, j.total)
		ipe := int64((j.reg.DatasetSize + j.batch - 1) / j.batch)
		j.epoch = int(j.done / ipe)
		next(protocol.Event{Type: protocol.EventProgress, Steps: steps, Elapsed: 55, Throughput: thr})
		if j.reg.Mode == "gns" && j.epoch >= 2 && j.batch == 32 {
			j.batch = 64
			j.total = j.done + (j.total-j.done)/2
			next(protocol.Event{Type: protocol.EventBatchSize})
		}
		if j.done >= j.total {
			j.finished = true
			next(protocol.Event{Type: protocol.EventDone})
		}
	}
	if k%11 == 7 {
		stale := evs[0]
		stale.Seq = 1 // out of order: rejected, changes nothing
		evs = append(evs, stale)
	}
	data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: j.reg.Job, Events: evs})
	h.append(h.subj.Events(j.reg.Job), nil, data)
}

func indexOf(model string) int {
	for i, m := range synthModels {
		if m.model == model {
			return i
		}
	}
	return 0
}

// run writes rounds rounds with n jobs, some registered late.
func (h *history) run(n, rounds int) {
	for i := range n / 2 {
		h.register(i)
	}
	for k := range rounds {
		if k == 3 || k == 10 {
			start := len(h.jobs)
			for i := start; i < min(n, start+n/4+1); i++ {
				h.register(i)
			}
		}
		h.round(k)
	}
}
