package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/internal/wire"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// pipelinePair drives two Cores with the same inputs: one with one-step
// ticks, one with the round open (the policy solving on another goroutine)
// while the same events are folded.
type pipelinePair struct {
	t          *testing.T
	one, split *Core
	seq        map[string]uint64
	done       map[string]int64
}

func newPipelinePair(t *testing.T, name string, jobs int) *pipelinePair {
	p := &pipelinePair{t: t, seq: map[string]uint64{}, done: map[string]int64{}}
	for _, c := range []**Core{&p.one, &p.split} {
		pol, err := policy.New(name, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if *c, err = NewCore(Config{GPUs: 6, RoundSeconds: 60}, pol); err != nil {
			t.Fatal(err)
		}
	}
	for i := range jobs {
		r := newJob(fmt.Sprintf("job-%02d", i), 1+i%3/2)
		r.TotalSteps = int64(20_000 + 3_000*i)
		for _, c := range []*Core{p.one, p.split} {
			if err := c.Register(1, &r); err != nil {
				t.Fatal(err)
			}
		}
		p.seq[r.Job] = 0
	}
	return p
}

// event folds the same event into both Cores (split first, while its round
// may be open).
func (p *pipelinePair) event(now float64, id string, steps int64, typ protocol.EventType) {
	p.seq[id]++
	p.done[id] += steps
	e := protocol.Event{V: protocol.Version, Job: id, Type: typ, Seq: p.seq[id], StepsDone: p.done[id], TotalSteps: 1_000_000, BatchSize: 32}
	if steps > 0 {
		e.Steps, e.Elapsed, e.Throughput = steps, 50, float64(steps)/50
	}
	for _, c := range []*Core{p.split, p.one} {
		if _, err := c.Apply(now, &e); err != nil {
			p.t.Fatalf("%s: %v", id, err)
		}
	}
}

func coreState(t *testing.T, c *Core) []byte {
	var e wire.Encoder
	if err := c.appendState(&e); err != nil {
		t.Fatal(err)
	}
	return e.Bytes()
}

// TestPipeline_EventsFoldedWhileTheRoundSolvesGiveWhatOneStepTicksGive:
// with the policy solving on its own goroutine while progress of the
// renewed jobs and the end of a waiting job are folded, every round (plan
// and leases) and the whole state, the policy's included, are byte for
// byte those of one-step ticks with the same events after them, also when
// a snapshot is saving the policy's state across the boundary; that
// snapshot, encoded on its own goroutine while the events are folded, is
// byte for byte the state when it was taken. Run with -race, it also shows
// that neither the solve nor the snapshot reads anything the events write.
func TestPipeline_EventsFoldedWhileTheRoundSolvesGiveWhatOneStepTicksGive(t *testing.T) {
	for _, name := range []string{"shockwave", "gavel", "themis"} {
		t.Run(name, func(t *testing.T) {
			p := newPipelinePair(t, name, 11)
			ran := map[string]bool{}
			ended := map[string]bool{}
			gapEvents := 0
			for k := range 14 {
				now := 100 + 60*float64(k)
				var lent chan struct{}
				var lentState []byte // the state the snapshot must write, encoded on the goroutine
				if k%3 == 2 {        // a snapshot saves the policy's state meanwhile (snapshot_core.go)
					want := coreState(t, p.split)
					img, marshal, err := p.split.lendPolicy()
					if err != nil {
						t.Fatal(err)
					}
					lent = make(chan struct{})
					go func() {
						// As the service's snapshot goroutine: the policy's
						// state, then the Core's as captured, encoded while
						// the events below are folded.
						state := marshal()
						var e wire.Encoder
						if err := img.append(&e); err == nil {
							e.Blob(state)
							if got := e.Bytes(); !bytes.Equal(got, want) {
								lentState = got
							}
						}
						close(lent)
					}()
				}
				for _, id := range sortedKeys(p.seq) { // the previous round's progress and heartbeats, before the tick
					if k > 0 && !ended[id] {
						steps := int64(0)
						if ran[id] {
							steps = 400
						}
						p.event(now-5, id, steps, protocol.EventProgress)
					}
				}
				var wait <-chan struct{}
				if lent != nil {
					wait = lent
				}
				open, err := p.split.BeginTick(now, wait)
				if err != nil {
					t.Fatal(err)
				}
				solved := make(chan struct{})
				var plan *policy.Plan
				var solveErr error
				go func() {
					defer close(solved)
					plan, solveErr = open.Solve()
				}()
				want, err := p.one.Tick(now)
				if err != nil {
					t.Fatal(err)
				}
				// While split's round is open: progress of jobs renewed
				// this round, and the end of a job that neither ran
				// last round nor runs now.
				next := map[string]bool{}
				for _, l := range want.Leases {
					if l.Action == protocol.Run {
						next[l.Job] = true
					}
				}
				for _, l := range want.Leases {
					if l.Action == protocol.Run && l.Extension {
						p.event(now+1, l.Job, 120, protocol.EventProgress)
						gapEvents++
					}
				}
				if k == 6 {
					for _, id := range sortedKeys(p.seq) {
						if !ended[id] && !ran[id] && !next[id] && p.seq[id] > 0 {
							p.event(now+2, id, 0, protocol.EventDone)
							ended[id] = true
							break
						}
					}
				}
				if lent != nil { // the policy comes back while the round is open
					<-lent
					p.split.returnPolicy()
					if lentState != nil {
						t.Fatalf("round %d: the snapshot encoded off the loop differs from the state when it was taken", k)
					}
				}
				<-solved
				got, err := p.split.EndTick(plan, solveErr)
				if err != nil {
					t.Fatal(err)
				}
				a, _ := json.Marshal(want)
				b, _ := json.Marshal(got)
				if !bytes.Equal(a, b) {
					t.Fatalf("round %d differs:\none-step %s\nsplit    %s", k, a, b)
				}
				ran = next
			}
			if len(ended) != 1 || gapEvents < 10 {
				t.Fatalf("the test folded %d events and %d ends while rounds were open", gapEvents, len(ended))
			}
			if !bytes.Equal(coreState(t, p.one), coreState(t, p.split)) {
				t.Error("the states (Core and policy) differ after the rounds")
			}
		})
	}
}

// TestPipeline_AnOpenRoundRefusesASecondTickAndSnapshots: one round at a
// time, and no snapshot of a half-done round.
func TestPipeline_AnOpenRoundRefusesASecondTickAndSnapshots(t *testing.T) {
	p := newPipelinePair(t, "gavel", 3)
	open, err := p.split.BeginTick(10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.split.BeginTick(11, nil); err == nil {
		t.Error("a second BeginTick while a round is open was accepted")
	}
	var e wire.Encoder
	if err := p.split.appendState(&e); err == nil {
		t.Error("a snapshot of an open round was taken")
	}
	if _, err := p.split.EndTick(open.Solve()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.split.EndTick(nil, nil); err == nil {
		t.Error("EndTick without an open round was accepted")
	}
	if err := p.split.appendState(&e); err != nil {
		t.Errorf("snapshot after the round closed: %v", err)
	}
}

func sortedKeys(m map[string]uint64) []string { return slices.Sorted(maps.Keys(m)) }

// TestFold_ANewLeaderClosesTheRoundItsPredecessorOpened: a round opened by
// one leader's tick is closed by the next leader's plan record; a plan
// record of the deposed epoch, or a second one, changes nothing; events
// are folded while the round is open and a registration waits for the
// close.
func TestFold_ANewLeaderClosesTheRoundItsPredecessorOpened(t *testing.T) {
	h := newHistory(t, "gavel", policy.Options{}, 4, 3)
	h.run(4, 2)
	round := h.f.core.NextRound()
	tick, _ := json.Marshal(tickRecord{V: 1, Round: round, Open: true})
	if o := h.append(h.subj.Prefix+"."+logTick, nil, tick); o.err != nil || h.f.open == nil {
		t.Fatalf("the tick did not open round %d: %+v", round, o)
	}
	lead, _ := json.Marshal(leaderRecord{V: 1, ID: "next", Epoch: 1})
	if o := h.append(h.subj.Prefix+"."+logLeader, nil, lead); o.kind != kindLeader || o.leader == nil {
		t.Fatalf("the leader record waited for the round: %+v", o)
	}
	if o := h.plan(round); len(o.rejected) == 0 || o.rejected[0] != "stale_leader" || h.f.open == nil {
		t.Fatalf("a plan record of the deposed epoch was not refused: %+v", o)
	}
	if o := h.append(h.subj.Prefix+"."+logRegister, nil, mustJSON(t, newJob("late", 1))); o.kind != kindHeld {
		t.Fatalf("a registration while the round is open: %+v, want it held", o)
	}
	j := h.jobs[0]
	h.events(j, false, 0)
	if o := h.f.core.jobs[j.reg.Job]; o.lastSeq != j.seq {
		t.Fatalf("an event while the round is open was not folded: seq %d, sent %d", o.lastSeq, j.seq)
	}
	plan, _ := json.Marshal(planRecord{V: 1, Round: round, Epoch: 1})
	o := h.append(h.subj.Prefix+"."+logPlan, nil, plan)
	if o.round == nil || h.f.open != nil {
		t.Fatalf("the new leader's plan record did not close the round: %+v", o)
	}
	for _, l := range o.round.Leases {
		if l.Epoch != 1 {
			t.Fatalf("lease %+v does not carry the closing leader's epoch", l)
		}
	}
	if len(o.held) != 1 || o.held[0].o.kind != kindRegister || o.held[0].o.answer.Error != nil {
		t.Fatalf("the held registration was not folded at the close: %+v", o.held)
	}
	if o := h.append(h.subj.Prefix+"."+logPlan, nil, plan); len(o.rejected) == 0 || o.rejected[0] != "stale_plan" {
		t.Fatalf("a second plan record for the closed round: %+v", o)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestService_ARoundOpenAtTheEndOfTheLogIsClosedByTheNextCoordinator: a
// coordinator that died between a round's tick record and its plan record
// left the round open; the next one replays the tick, solves, appends the
// plan record under its own epoch, publishes the round's leases and goes
// on with the rounds after it.
func TestService_ARoundOpenAtTheEndOfTheLogIsClosedByTheNextCoordinator(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy = "shockwave" })
	nc := e.client()
	register(t, nc, e.subj, newJob("a", 1))
	eventually(t, 10*time.Second, "two rounds", func() bool { return e.svc.Health().Rounds >= 2 })
	e.stopService()
	round, epoch := e.svc.nextRound(), e.svc.logEpoch.Load()
	// What the dead coordinator wrote last: the tick of the next round.
	owner, err := e.emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	js, err := jetstream.New(owner)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, e.subj.Prefix+"."+logTick, mustJSON(t, tickRecord{V: protocol.Version, Round: round, Epoch: epoch, Open: true})); err != nil {
		t.Fatal(err)
	}
	leases := watchLeases(t, nc, e.subj.Lease("a"))
	e.startService()
	eventually(t, 10*time.Second, "the open round's lease", func() bool {
		_, ok := leases.find(func(l *protocol.Lease) bool { return l.Round == round && l.Epoch > epoch })
		return ok
	})
	eventually(t, 10*time.Second, "rounds after it", func() bool { return status(t, nc, e.subj).Round > round+2 })
	if h := e.svc.Health(); h.Epoch <= epoch {
		t.Errorf("the log's epoch %d did not move past the dead coordinator's %d", h.Epoch, epoch)
	}
}

// TestFold_ATickOfALogWithoutPlanRecordsIsAWholeRound: a log written
// before plan records existed replays as it was folded then — each tick a
// whole round boundary — and a plan record after it changes nothing.
func TestFold_ATickOfALogWithoutPlanRecordsIsAWholeRound(t *testing.T) {
	h := newHistory(t, "gavel", policy.Options{}, 4, 5)
	for i := range 3 {
		h.register(i)
	}
	for round := range 3 {
		o := h.append(h.subj.Prefix+"."+logTick, nil, mustJSON(t, tickRecord{V: 1, Round: round}))
		if o.round == nil || o.round.Index != round || h.f.open != nil {
			t.Fatalf("the tick of round %d was not a whole round: %+v (open %v)", round, o, h.f.open != nil)
		}
		if o := h.plan(round); len(o.rejected) == 0 || o.rejected[0] != "stale_plan" {
			t.Fatalf("a plan record after a whole round: %+v", o)
		}
		for _, j := range h.jobs {
			h.events(j, false, round)
		}
	}
}
