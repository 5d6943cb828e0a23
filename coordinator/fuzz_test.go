package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// The coordinator's own decoders — log records and the requester identity
// header — and the fold of arbitrary job messages. `go test` runs the seeds;
// `make fuzz-short` fuzzes each target briefly.

func FuzzDecodeTickRecord(f *testing.F) {
	for _, s := range []string{`{"v":1,"round":3}`, `{"v":1,"round":-1}`, `{"v":2,"round":0}`, `{"v":1,"round":1,"x":1}`, ``, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeTickRecord(data)
		if err == nil && (r.V != protocol.Version || r.Round < 0) {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func FuzzDecodeConfigRecord(f *testing.F) {
	good, _ := json.Marshal(configRecord{V: 1, GPUs: 4, RoundSeconds: 120, Policy: "gavel"})
	for _, s := range []string{string(good), `{"v":1,"gpus":-1}`, `{"v":1,"policy_config":{"a":[1]}}`, `{`, `null`,
		`{"v":1,"gpus":6,"round_seconds":60,"policy":"gavel","cluster":{"nodes":[{"name":"a","gpus":4},{"name":"b","gpus":2,"type":"t"}]}}`,
		`{"v":1,"gpus":4,"round_seconds":60,"policy":"gavel","cluster":{"nodes":[{"name":"a","gpus":4},{"name":"a","gpus":4}]}}`,
		`{"v":1,"round_seconds":60,"policy":"gavel","dynamic":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeConfigRecord(data)
		if err != nil {
			return
		}
		if r.V != protocol.Version {
			t.Fatalf("accepted version %d", r.V)
		}
		_, _ = r.core() // may refuse the values, must not panic
	})
}

func FuzzAuthorize(f *testing.F) {
	for _, s := range []string{`{"acc":"A","name_tag":"j1"}`, `{"name_tag":""}`, `{`, ``, `{"name_tag":7}`} {
		f.Add(s, "j1")
	}
	f.Fuzz(func(t *testing.T, header, job string) {
		h := nats.Header{}
		if header != "" {
			h.Set("Nats-Request-Info", header)
		}
		if err := authorizeHeader(h, job); err == nil && header != "" {
			var ri requestInfo
			if json.Unmarshal([]byte(header), &ri) != nil || (ri.NameTag != job && ri.Account != localJobsAccount) {
				t.Fatalf("authorized %q for job %q", header, job)
			}
		}
	})
}

// FuzzFold_RejectedMessagesChangeNothing folds arbitrary bytes as an event
// batch and as a registration: no panic, and a message whose every part
// was rejected leaves the job table and plan as they were.
func FuzzFold_RejectedMessagesChangeNothing(f *testing.F) {
	batch, _ := json.Marshal(protocol.Batch{V: 1, Job: "a", Events: []protocol.Event{progress(1, 10, 10, 1)}})
	reg, _ := json.Marshal(newJob("b", 1))
	for _, s := range []string{string(batch), string(reg), `{"v":1,"job":"a","events":[{"v":1,"type":"done","job":"a","seq":1}]}`,
		`{"v":1,"job":"a","events":[{"v":1,"type":"progress","job":"a","seq":9,"elapsed":1e308,"steps_done":1,"total_steps":1,"batch_size":1}]}`, `{}`, `x`} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, asEvents bool) {
		fl := fuzzFold(t)
		before, _, _ := digest(fl.core)
		subject := fl.subj.Prefix + "." + logRegister
		if asEvents {
			subject = fl.subj.Events("a")
		}
		o := fl.apply(record{Seq: 4, Time: time.Unix(1000, 0), Subject: subject, Header: nats.Header{}, Data: data})
		after, _, _ := digest(fl.core)
		changed := o.accepted > 0 || (o.kind == kindRegister && o.answer != nil && o.answer.Error == nil)
		if !changed && before != after {
			t.Fatalf("a rejected message changed the state: %+v", o)
		}
	})
}

// fuzzFold is a fold with one admitted job "a" on 2 GPUs.
func fuzzFold(t *testing.T) *fold { return foldOn(t, nil) }

// foldOn is fuzzFold's on the given cluster of 2 GPUs (nil: a flat pool).
func foldOn(t *testing.T, cluster *topology.Cluster) *fold {
	fl := newFold(protocol.Subjects{Prefix: "shockwave"}, 4096)
	cfg, _ := json.Marshal(configRecord{V: 1, GPUs: 2, Cluster: cluster, RoundSeconds: 10, JobTimeout: 30, LeaseGrace: 1, Policy: "gandiva_fair"})
	reg, _ := json.Marshal(newJob("a", 1))
	tick, _ := json.Marshal(tickRecord{V: 1, Round: 0})
	for i, r := range []record{
		{Subject: "shockwave.log.config", Data: cfg},
		{Subject: "shockwave.log.register", Data: reg},
		{Subject: "shockwave.log.tick", Data: tick},
	} {
		r.Seq, r.Time, r.Header = uint64(i+1), time.Unix(1000, 0), nats.Header{}
		if o := fl.apply(r); o.err != nil {
			t.Fatalf("setup record %d: %v", i, o.err)
		}
	}
	return fl
}
