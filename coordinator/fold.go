package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// record is one message of the log.
type record struct {
	Seq     uint64
	Pending uint64    // records after this one in the log when it was read
	Time    time.Time // when the stream stored it: Core's clock
	Subject string
	Header  nats.Header
	Data    []byte
	// batch is Data decoded, when the reader decoded an event batch
	// before handing the record over (a pure function of Data, so the
	// fold's result is the same); decErr is that decoding's error.
	batch  *protocol.Batch
	decErr error
	// carried are the records a carried record holds, when the reader took
	// it apart (carry.go; decErr: why it could not); via and residents
	// mark each of them as hdrVia and hdrResidents mark a record an agent
	// carried on its own.
	carried   []record
	via       string
	residents bool
}

// viaNode is the node whose agent carried r, or "".
func (r *record) viaNode() string {
	if r.via != "" {
		return r.via
	}
	return r.Header.Get(hdrVia)
}

// carriesResidents says r was carried where agents may speak for the jobs
// resident on their node.
func (r *record) carriesResidents() bool {
	return r.residents || r.Header.Get(hdrResidents) != ""
}

func recordOf(m jetstream.Msg) (record, error) {
	md, err := m.Metadata()
	if err != nil {
		return record{}, err
	}
	return record{Seq: md.Sequence.Stream, Pending: md.NumPending, Time: md.Timestamp, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, nil
}

// seconds converts a wall-clock time to Core's clock: seconds since the
// Unix epoch.
func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// wall converts Core's clock back to a wall-clock time.
func wall(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }

// Kinds of log records.
const (
	kindEvents   = "events"
	kindRegister = "register"
	kindTick     = "tick"
	kindPlan     = "plan"
	kindHeld     = "held" // folded when the open round closes
	kindConfig   = "config"
	kindLeader   = "leader"
	kindUnknown  = "unknown"
	kindCarried  = "carried" // the agents' batches, several to a record (carry.go)
)

// outcome is what folding one record produced. The live service publishes
// it; a replay discards it.
type outcome struct {
	kind     string
	job      string
	reply    string                  // register: where the answer goes
	answer   *protocol.RegisterReply // register: the answer
	accepted int                     // events accepted
	rejected []string                // one reason per rejected event or message
	err      error                   // the first rejection, or a tick's error
	round    *Round                  // plan: the round it started
	solve    time.Duration           // plan: how long the policy's solve took
	admitted time.Duration           // plan: how much of it the held calls and admissions took
	began    time.Time               // plan: when the solve's goroutine started
	held     []heldOutcome           // plan: records held while the round was open, folded after it; carried: the batches
	exits    []protocol.Lease        // EXIT leases returned by events
	leader   *leaderRecord           // leader: the record
	// Records of agents and submissions (runner.go): the reply to send, and
	// whether the nodes' desired state changed.
	agentAnswer any
	desired     bool
}

func (o *outcome) reject(reason string, err error) {
	o.rejected = append(o.rejected, reason)
	if o.err == nil {
		o.err = err
	}
}

// fold applies log records to a Core, in log order, with each record's
// storage time as the clock (made monotonic). The live service and a replay
// after a restart run the same fold over the same records, so they reach the
// same state: Core and its policy are deterministic.
type fold struct {
	core  *Core
	cfg   *configRecord
	subj  protocol.Subjects
	limit int

	now    float64
	seq    uint64
	last   *Round                    // the most recent round
	leases map[string]protocol.Lease // RUN leases of the most recent round
	// relayedReg: jobs whose registered process reads its leases from its
	// agent (Register.Relayed); relayed: the jobs whose leases of the most
	// recent round agents relay; unheard: the submitted jobs whose leases
	// of the most recent round have no process to go to (relay.go).
	relayedReg, relayed, unheard map[string]bool
	run                          *runner // submitted jobs and node agents (runner.go)

	// epoch is the highest leader epoch of the log (leader.go): ticks of
	// an older epoch are ignored, and leases carry the epoch of the tick
	// that issued them.
	epoch uint64
	// budgets are the event budgets of known jobs (caps.go).
	budgets map[string]*budget
	// forgotten are the jobs the Core forgot since the service last asked
	// (takeForgotten); not state.
	forgotten []string
	// open is the round between its tick and its plan record, and held
	// the records other than events and leader records that arrived
	// meanwhile, folded in order once it closes (pipeline.go).
	open *solving
	held []record
	// sizes are the last snapshot encoding's (snapshot.go).
	sizes encodeSizes
	// lending is closed when the policy's state, lent to a snapshot being
	// written, is saved; the policy goes back to the Core before it is
	// read again (snapshot.go).
	lending chan struct{}
}

// heldOutcome is a held record and what folding it produced.
type heldOutcome struct {
	r record
	o outcome
}

func newFold(subj protocol.Subjects, limit int) *fold {
	return &fold{subj: subj, limit: limit, leases: map[string]protocol.Lease{}, run: newRunner(),
		relayedReg: map[string]bool{}, relayed: map[string]bool{}, unheard: map[string]bool{}, budgets: map[string]*budget{}}
}

// apply folds one record.
func (f *fold) apply(r record) outcome {
	f.seq = r.Seq
	f.now = max(f.now, seconds(r.Time))
	if f.open != nil && f.heldBack(r) {
		f.held = append(f.held, r)
		return outcome{kind: kindHeld}
	}
	switch {
	case r.Subject == f.subj.Prefix+"."+logConfig:
		return f.config(r)
	case f.core == nil:
		o := outcome{kind: kindUnknown}
		o.reject("not_configured", errors.New("coordinator: record before the configuration"))
		return o
	case r.Subject == f.subj.Prefix+"."+logRegister:
		return f.register(r)
	case r.Subject == f.subj.Prefix+"."+logTick:
		return f.tick(r)
	case r.Subject == f.subj.Prefix+"."+logPlan:
		return f.plan(r)
	case r.Subject == f.subj.Prefix+"."+logLeader:
		return f.leader(r)
	case r.Subject == f.subj.Prefix+"."+logCluster:
		return f.resize(r)
	case isCarried(f.subj, r.Subject):
		return f.carriedRecord(r)
	}
	if o, ok := f.applyRunner(r); ok {
		return o
	}
	if job, ok := f.subj.EventsJob(r.Subject); ok {
		before, managed := f.core.Managed(job)
		o := f.events(job, r)
		if !managed {
			return o
		}
		if after, _ := f.core.Managed(job); after != before {
			f.run.dirty = true // it ended: the nodes' assignments change (runner.go)
		}
		return o
	}
	o := outcome{kind: kindUnknown}
	o.reject("unknown_subject", fmt.Errorf("coordinator: log record on unexpected subject %q", r.Subject))
	return o
}

// config builds the Core from the first configuration record; later ones
// must be identical.
func (f *fold) config(r record) outcome {
	o := outcome{kind: kindConfig}
	rec, err := decodeConfigRecord(r.Data)
	switch {
	case err != nil:
		o.reject("invalid", err)
	case f.cfg != nil && !sameConfig(f.cfg, rec):
		o.reject("config_changed", errors.New("coordinator: a later configuration record differs from the first; ignored"))
	case f.cfg == nil:
		core, err := rec.core()
		if err != nil {
			o.reject("invalid", err)
			break
		}
		f.core, f.cfg = core, rec
		core.onForget = f.forgetJob
	}
	return o
}

// forgetJob drops what the fold keeps of a job the Core forgot
// (retention.go): its event budget and its submission. The service drops
// what it keeps (takeForgotten).
func (f *fold) forgetJob(id string) {
	delete(f.budgets, id)
	delete(f.run.subs, id)
	f.forgotten = append(f.forgotten, id)
}

// takeForgotten returns the jobs forgotten since the last call.
func (f *fold) takeForgotten() []string {
	ids := f.forgotten
	f.forgotten = f.forgotten[:0]
	return ids
}

func (f *fold) register(r record) outcome {
	o := outcome{kind: kindRegister, reply: r.Header.Get(hdrReply)}
	reg, err := protocol.DecodeRegister(r.Data, f.limit)
	if err == nil {
		err = f.vouches(r, reg.Job, reg.Node, true)
	}
	if err == nil {
		o.job = reg.Job
		var resumed bool
		if resumed, err = f.core.Enroll(f.now, reg); err == nil {
			// A job nobody submitted reads its leases from an agent only
			// when that agent carried the registration (its job socket).
			_, submitted := f.run.subs[reg.Job]
			was := f.relayedReg[reg.Job]
			if reg.Relayed && (submitted || r.viaNode() != "") {
				f.relayedReg[reg.Job] = true
			} else {
				delete(f.relayedReg, reg.Job)
			}
			if !submitted && was != f.relayedReg[reg.Job] {
				f.run.dirty = true // the node's relayed residents change
			}
			o.answer = f.answer(reg.Job, resumed)
			return o
		}
	}
	o.reject(rejectReason(err), err)
	o.answer = &protocol.RegisterReply{V: protocol.Version, Error: protocol.ErrorOf(replyCode(err), err)}
	return o
}

// answer is the registration reply for job.
func (f *fold) answer(job string, resumed bool) *protocol.RegisterReply {
	st, _ := f.core.Job(job)
	a := &protocol.RegisterReply{V: protocol.Version, Job: job, State: string(st.State), Resumed: resumed,
		RoundSeconds: f.core.Config().RoundSeconds, Round: f.core.NextRound(), Now: f.now,
		LastSeq: st.LastSeq, StepsDone: st.StepsDone, TotalSteps: st.TotalSteps, Epoch: st.Epoch, BatchSize: st.BatchSize}
	if l, ok := f.leases[job]; ok && len(st.GPUs) > 0 {
		a.Lease = &l
	}
	return a
}

func (f *fold) events(job string, r record) outcome {
	o := outcome{kind: kindEvents, job: job}
	// An agent's batch for a job it does not run is refused before it can
	// spend that job's budget.
	if err := f.vouches(r, job, "", false); err != nil {
		o.reject(rejectReason(err), err)
		return o
	}
	if err := f.spend(job, r); err != nil {
		o.reject("rate_limited", err)
		return o
	}
	b, err := r.batch, r.decErr
	if b == nil && err == nil {
		b, err = protocol.DecodeBatch(r.Data, f.limit)
	}
	if err != nil {
		o.reject(protocol.Reason(err), err)
		return o
	}
	if b.Job != job {
		o.reject("subject_mismatch", fmt.Errorf("coordinator: batch of job %q published on the subject of job %q", b.Job, job))
		return o
	}
	for i := range b.Events {
		l, err := f.core.Deliver(f.now, &b.Events[i])
		if err != nil {
			o.reject(rejectReason(err), err)
			continue
		}
		o.accepted++
		if l != nil {
			l.Epoch = f.epoch
			o.exits = append(o.exits, *l)
			delete(f.leases, job)
			delete(f.relayedReg, job)
		}
	}
	return o
}

func (f *fold) tick(r record) outcome {
	o := outcome{kind: kindTick}
	t, err := decodeTickRecord(r.Data)
	if err != nil {
		o.reject("invalid", err)
		return o
	}
	if t.Epoch < f.epoch {
		o.reject("stale_leader", fmt.Errorf("coordinator: tick of round %d from epoch %d; the log's leader epoch is %d", t.Round, t.Epoch, f.epoch))
		return o
	}
	if t.Round != f.core.NextRound() {
		o.reject("stale_tick", fmt.Errorf("coordinator: tick for round %d, next round is %d", t.Round, f.core.NextRound()))
		return o
	}
	if !t.Open {
		return f.wholeTick(t, o)
	}
	open, err := f.core.BeginTick(f.now, f.lending) // a lent policy: the solve waits for it
	if err != nil {
		o.err = err
		return o
	}
	f.open = startSolve(open)
	return o
}

// wholeTick folds a tick record written before rounds had plan records:
// the whole boundary at once, as it was folded when it was written.
func (f *fold) wholeTick(t *tickRecord, o outcome) outcome {
	f.returnPolicy()
	start := time.Now()
	round, err := f.core.Tick(f.now)
	o.solve = time.Since(start)
	if err != nil {
		o.err = err
		return o
	}
	f.closed(round, t.Epoch, &o)
	return o
}

// closed records a round that started: its leases carry epoch.
func (f *fold) closed(round *Round, epoch uint64, o *outcome) {
	if len(round.Covered) > 0 && !issuedIn(f.last, epoch) {
		// The first round of a new leader: every lease is sent, so that
		// every job learns the new epoch (a job drops leases of older ones).
		round.Covered = nil
	}
	for i := range round.Leases {
		round.Leases[i].Epoch = epoch
	}
	o.round, f.last = round, round
	prev := f.leases
	f.leases = make(map[string]protocol.Lease, len(prev))
	for _, l := range round.Leases {
		if l.Action == protocol.Run {
			f.leases[l.Job] = l
		}
	}
	f.markRelayed(round, prev)
	for _, e := range round.Ended {
		delete(f.relayedReg, e.Job)
	}
	for _, e := range round.Lost {
		delete(f.relayedReg, e.Job)
	}
	f.afterTick()
}

// plan closes the open round: the policy's plan is placed and the leases
// issued, then the records held while it was open are folded.
func (f *fold) plan(r record) outcome {
	o := outcome{kind: kindPlan}
	p, err := decodePlanRecord(r.Data)
	if err != nil {
		o.reject("invalid", err)
		return o
	}
	if p.Epoch < f.epoch {
		o.reject("stale_leader", fmt.Errorf("coordinator: plan of round %d from epoch %d; the log's leader epoch is %d", p.Round, p.Epoch, f.epoch))
		return o
	}
	if f.open == nil || f.open.t.Round() != p.Round {
		o.reject("stale_plan", fmt.Errorf("coordinator: plan for round %d, which is not open", p.Round))
		return o
	}
	s := f.open
	f.open = nil
	<-s.done
	o.solve, o.admitted, o.began = s.took, s.admitted, s.began
	round, err := f.core.EndTick(s.plan, s.err)
	if err != nil {
		o.err = err
	} else {
		f.closed(round, p.Epoch, &o)
	}
	held := f.held
	f.held = nil
	for _, h := range held {
		o.held = append(o.held, heldOutcome{r: h, o: f.apply(h)})
	}
	return o
}

// heldBack says whether a record that arrives while a round is open waits for
// it to close: everything but job events, which are folded at once (the
// point of the open round), and leader records, which only raise the
// epoch (a new leader must see its own record to close the round).
func (f *fold) heldBack(r record) bool {
	if r.Subject == f.subj.Prefix+"."+logLeader || r.Subject == f.subj.Prefix+"."+logPlan ||
		isCarried(f.subj, r.Subject) { // the records a carried one holds are held one by one
		return false
	}
	_, events := f.subj.EventsJob(r.Subject)
	return !events
}

// rejectReason names the class of an error for the rejection metrics.
func rejectReason(err error) string {
	for _, c := range []struct {
		err    error
		reason string
	}{
		{ErrUnknownJob, "unknown_job"}, {ErrOutOfOrder, "out_of_order"}, {ErrJobEnded, "ended"},
		{ErrNotAdmitted, "not_admitted"}, {ErrConflict, "conflict"}, {ErrTooWide, "too_wide"},
		{ErrClock, "clock"}, {ErrUnknownNode, "unknown_node"}, {ErrBadNode, "bad_node"},
		{errNotVouched, "not_placed"},
	} {
		if errors.Is(err, c.err) {
			return c.reason
		}
	}
	return protocol.Reason(err)
}

// replyCode maps a registration error to its reply code.
func replyCode(err error) protocol.ErrorCode {
	switch rejectReason(err) {
	case "conflict":
		return protocol.CodeConflict
	case "ended":
		return protocol.CodeEnded
	case "too_wide", "clock", "unknown_node", "bad_node":
		return protocol.CodeRejected
	case "not_placed":
		return protocol.CodeForbidden
	}
	return protocol.Code(err)
}

func sameConfig(a, b *configRecord) bool {
	return a.GPUs == b.GPUs && a.RoundSeconds == b.RoundSeconds && a.MaxFailed == b.MaxFailed &&
		a.RuntimeLimit == b.RuntimeLimit && a.LeaseGrace == b.LeaseGrace && a.JobTimeout == b.JobTimeout &&
		a.leaseRounds() == b.leaseRounds() &&
		a.Dynamic == b.Dynamic && reflect.DeepEqual(a.Cluster, b.Cluster) && a.Reallocate == b.Reallocate &&
		a.KeepEnded == b.KeepEnded &&
		a.Policy == b.Policy && strings.TrimSpace(string(a.PolicyConfig)) == strings.TrimSpace(string(b.PolicyConfig))
}

// leader raises the log's epoch.
func (f *fold) leader(r record) outcome {
	o := outcome{kind: kindLeader}
	rec, err := decodeLeaderRecord(r.Data)
	if err != nil {
		o.reject("invalid", err)
		return o
	}
	if rec.Epoch <= f.epoch {
		o.reject("stale_leader", fmt.Errorf("coordinator: leader record of epoch %d; the log's epoch is already %d", rec.Epoch, f.epoch))
		return o
	}
	f.epoch, o.leader = rec.Epoch, rec
	return o
}

// orNone shows a logged policy configuration in an error message.
func orNone(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "none"
	}
	return string(raw)
}
