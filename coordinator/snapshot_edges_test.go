package coordinator

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// extremeJobs are registrations at the edges of what the protocol accepts:
// the largest batch size, dataset, epoch count, throughput, priority and
// times; a gang as wide as the test cluster (8: a wider one is refused); a long declared schedule of the largest batch
// size and the longest epochs.
func extremeJobs() []protocol.Register {
	const epochs = 100_000 // the most a registration may imply
	ds := protocol.MaxBatchSize * protocol.MaxEpochs
	ipe := int64(ds / protocol.MaxBatchSize)
	sched := &protocol.Schedule{BatchSizes: make([]int, 10_000), EpochSeconds: make([]float64, 10_000)}
	for i := range sched.BatchSizes {
		sched.BatchSizes[i], sched.EpochSeconds[i] = protocol.MaxBatchSize, protocol.MaxSeconds
	}
	big := protocol.Register{V: protocol.Version, Job: "edge-big", Model: "LM", Mode: "gns", Workers: 8,
		BatchSize: protocol.MaxBatchSize, DatasetSize: ds, TotalSteps: epochs * ipe,
		Priority: 1e6, Throughput: protocol.MaxThroughput, IsolatedSeconds: protocol.MaxSeconds}
	wide := protocol.Register{V: protocol.Version, Job: "edge-wide", Model: "ResNet-50", Mode: "accordion", Workers: 8,
		BatchSize: 1, DatasetSize: 1, TotalSteps: epochs, Throughput: 1e-300, IsolatedSeconds: 1e-300}
	long := protocol.Register{V: protocol.Version, Job: "edge-schedule", Model: "LM", Mode: "static", Workers: 1,
		BatchSize: protocol.MaxBatchSize, DatasetSize: protocol.MaxBatchSize, TotalSteps: 10_000,
		Throughput: 1, Schedule: sched}
	late := protocol.Register{V: protocol.Version, Job: "edge-late", Model: "LM", Mode: "static", Workers: 1,
		BatchSize: 1, DatasetSize: 1, TotalSteps: 1, SubmitTime: protocol.MaxSeconds}
	return []protocol.Register{big, wide, long, late}
}

// TestSnapshot_RegistrationsAndEventsAtTheProtocolsEdgesSurviveARestore:
// what the protocol accepts, a snapshot must restore (a state that cannot
// be loaded stops the coordinator's next start). Until session 25 the
// forecaster's state refused a dataset past 2^31 samples on load (a
// registration may declare up to 2^44; a token-level dataset passes 2^31),
// so every snapshot of the online Shockwave fold taken while such a job
// lived failed to restore. Each policy's fold takes
// the extreme registrations and, for each, events at the edges (the most
// steps, seconds, throughput, epoch and batch size), then saves a state
// that restores and saves again byte for byte and folds the next round as
// the uninterrupted fold does.
func TestSnapshot_RegistrationsAndEventsAtTheProtocolsEdgesSurviveARestore(t *testing.T) {
	for _, pc := range snapshotPolicies() {
		name := pc.name
		if pc.opts.Config != nil {
			name += "-profile"
		}
		t.Run(name, func(t *testing.T) {
			h := newHistory(t, pc.name, pc.opts, 8, 9)
			h.run(4, 2)
			for _, reg := range extremeJobs() {
				o := h.append(h.subj.Prefix+"."+logRegister, nats.Header{hdrReply: []string{"_INBOX.reply"}}, mustJSON(t, reg))
				if o.answer == nil || o.answer.Error != nil {
					t.Fatalf("%s: the registration was refused: %+v", reg.Job, o.answer)
				}
			}
			edge := func(reg protocol.Register, seq uint64) {
				elapsed := protocol.MaxSeconds
				if reg.IsolatedSeconds > 0 { // a run-time limit: the job would expire and leave the state
					elapsed = 1
				}
				evs := []protocol.Event{
					{Type: protocol.EventProgress, Steps: reg.TotalSteps / 2, Elapsed: elapsed, Throughput: protocol.MaxThroughput,
						StepsDone: reg.TotalSteps / 2, TotalSteps: reg.TotalSteps, Epoch: protocol.MaxEpochs, BatchSize: protocol.MaxBatchSize},
					{Type: protocol.EventBatchSize, StepsDone: reg.TotalSteps / 2, TotalSteps: reg.TotalSteps, Epoch: protocol.MaxEpochs, BatchSize: 1},
				}
				for i := range evs {
					evs[i].V, evs[i].Job, evs[i].Seq = protocol.Version, reg.Job, seq+uint64(i)
				}
				data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: reg.Job, Events: evs})
				h.append(h.subj.Events(reg.Job), nil, data)
			}
			for _, reg := range extremeJobs() {
				edge(reg, 1)
			}
			h.round(2)
			for _, reg := range extremeJobs() {
				edge(reg, 3)
			}
			h.round(3)
			for _, reg := range extremeJobs() {
				st, ok := h.f.core.Job(reg.Job)
				if !ok {
					t.Fatalf("%s unknown", reg.Job)
				}
				if st.State != string(Active) {
					t.Fatalf("%s is %s, not active: the snapshot would not hold it", reg.Job, st.State)
				}
			}
			f, data, err := saveAndRestore(t, h)
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if again, _ := f.encodeState(); !bytes.Equal(again, data) {
				t.Fatal("the state does not survive a restore byte for byte")
			}
			from := len(h.records)
			h.round(4)
			for k := from; k < len(h.records); k++ {
				f.apply(h.records[k])
			}
			want, _ := h.f.encodeState()
			if got, _ := f.encodeState(); !bytes.Equal(got, want) {
				t.Fatal("the restored fold's state differs from the uninterrupted fold's after a round")
			}
		})
	}
}

// saveAndRestore encodes h's fold as a snapshot and restores a fold from
// it; the error is the restore's.
func saveAndRestore(t *testing.T, h *history) (*fold, []byte, error) {
	t.Helper()
	data, err := h.f.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	s, err := DecodeStateSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.restore(h.subj, protocol.DefaultMaxMessageBytes)
	return f, data, err
}
