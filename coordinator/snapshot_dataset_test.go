package coordinator

import (
	"bytes"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestSnapshot_AJobWithADatasetPast2To31SamplesSurvivesARestore: a
// registration may declare up to the largest batch size times the most
// epochs in samples (about 1.7·10^12), and a token-level dataset can pass
// 2^31. The forecaster's state refused such a size on load, so every
// snapshot taken while the job lived could not be restored. Each policy's
// fold, with such a job registered and running, saves a state that
// restores and saves again byte for byte, and folds the next round as the
// uninterrupted fold does.
func TestSnapshot_AJobWithADatasetPast2To31SamplesSurvivesARestore(t *testing.T) {
	for _, pc := range snapshotPolicies() {
		name := pc.name
		if pc.opts.Config != nil {
			name += "-profile"
		}
		t.Run(name, func(t *testing.T) {
			h := newHistory(t, pc.name, pc.opts, 8, 7)
			h.run(4, 2)
			big := &synthJob{reg: protocol.Register{V: protocol.Version, Job: "tokens", Model: "LM", Mode: "static",
				Workers: 1, BatchSize: 1024, DatasetSize: 3_000_000_000, TotalSteps: 10 * 2_929_688,
				Throughput: 4, IsolatedSeconds: 10 * 2_929_688 / 4.0}, total: 10 * 2_929_688, batch: 1024, silentFrom: -1}
			if big.reg.DatasetSize <= 1<<31 || big.reg.DatasetSize > protocol.MaxBatchSize*protocol.MaxEpochs {
				t.Fatalf("dataset size %d is not between 2^31 and the protocol's limit", big.reg.DatasetSize)
			}
			h.jobs = append(h.jobs, big)
			if o := h.append(h.subj.Prefix+"."+logRegister, nats.Header{hdrReply: []string{"_INBOX.reply"}}, mustJSON(t, big.reg)); o.answer == nil || o.answer.Error != nil {
				t.Fatalf("the registration was refused: %+v", o.answer)
			}
			h.round(2)
			h.round(3)
			data, err := h.f.encodeState()
			if err != nil {
				t.Fatal(err)
			}
			s, err := DecodeStateSnapshot(data)
			if err != nil {
				t.Fatal(err)
			}
			f, err := s.restore(h.subj, protocol.DefaultMaxMessageBytes)
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
