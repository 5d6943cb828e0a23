package protocol_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

const goodRegister = `{"v":1,"job":"j1","model":"ResNet-18","workers":2,"batch_size":32,"dataset_size":50000,"total_steps":1000}`

const goodBatch = `{"v":1,"job":"j1","events":[` +
	`{"v":1,"type":"progress","job":"j1","seq":1,"steps":10,"elapsed":1.5,"steps_done":10,"total_steps":1000,"epoch":0,"batch_size":32,"throughput":6.6},` +
	`{"v":1,"type":"done","job":"j1","seq":2,"steps_done":1000,"total_steps":1000,"epoch":3,"batch_size":32}]}`

const goodLease = `{"v":1,"job":"j1","round":3,"action":"RUN","workers":[0,1],"extension":true,"start":100,"expiry":230}`

func TestDecodeRegister_AcceptsAValidMessage(t *testing.T) {
	r, err := protocol.DecodeRegister([]byte(goodRegister), 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Job != "j1" || r.Workers != 2 || r.TotalSteps != 1000 {
		t.Errorf("decoded %+v", r)
	}
}

func TestDecoders_RejectBadInputWithAReason(t *testing.T) {
	cases := []struct {
		name, data, reason, mention string
	}{
		{"malformed", `{"v":1,"job":`, "malformed", "unexpected end"},
		{"not an object", `[1,2]`, "malformed", "expected a JSON object"},
		{"missing version", `{"job":"j1"}`, "version", "missing schema version"},
		{"future version", `{"v":2,"job":"j1","brand_new":true}`, "version", "unsupported schema version 2"},
		{"version as string", `{"v":"1","job":"j1"}`, "version", "unsupported"},
		{"wrong field type", strings.Replace(goodRegister, `"workers":2`, `"workers":"two"`, 1), "malformed", `"workers"`},
		{"unknown field", strings.Replace(goodRegister, `"v":1`, `"v":1,"gpus":4`, 1), "malformed", `unknown field "gpus"`},
		{"trailing data", goodRegister + `{}`, "malformed", "after top-level value"},
		{"negative value", strings.Replace(goodRegister, `"total_steps":1000`, `"total_steps":-1`, 1), "invalid", "total_steps"},
		{"absurd value", strings.Replace(goodRegister, `"workers":2`, `"workers":100000`, 1), "invalid", "workers"},
		{"bad job id", strings.Replace(goodRegister, `"j1"`, `"a.b"`, 1), "invalid", "job id"},
		{"too large", goodRegister + strings.Repeat(" ", 300<<10), "too_large", "exceed the limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := protocol.DecodeRegister([]byte(c.data), 0)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, protocol.ErrInvalid) {
				t.Errorf("%v does not wrap ErrInvalid", err)
			}
			if got := protocol.Reason(err); got != c.reason {
				t.Errorf("reason %q, want %q (%v)", got, c.reason, err)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
		})
	}
}

func TestDecodeBatch_RejectsNaNAndMismatchedJobs(t *testing.T) {
	for name, data := range map[string]string{
		"NaN is not JSON":   strings.Replace(goodBatch, `"elapsed":1.5`, `"elapsed":NaN`, 1),
		"huge exponent":     strings.Replace(goodBatch, `"elapsed":1.5`, `"elapsed":1e400`, 1),
		"foreign event":     strings.Replace(goodBatch, `"job":"j1","seq":2`, `"job":"j2","seq":2`, 1),
		"negative steps":    strings.Replace(goodBatch, `"steps":10`, `"steps":-10`, 1),
		"zero sequence":     strings.Replace(goodBatch, `"seq":1`, `"seq":0`, 1),
		"empty batch":       `{"v":1,"job":"j1","events":[]}`,
		"unknown event":     strings.Replace(goodBatch, `"type":"progress"`, `"type":"launch"`, 1),
		"absurd throughput": strings.Replace(goodBatch, `"throughput":6.6`, `"throughput":1e300`, 1),
	} {
		if _, err := protocol.DecodeBatch([]byte(data), 0); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := protocol.DecodeBatch([]byte(goodBatch), 0); err != nil {
		t.Errorf("good batch rejected: %v", err)
	}
}

func TestDecodeBatch_LimitIsConfigurable(t *testing.T) {
	if _, err := protocol.DecodeBatch([]byte(goodBatch), 100); protocol.Reason(err) != "too_large" {
		t.Errorf("a %d-byte batch under a 100-byte limit: %v", len(goodBatch), err)
	}
}

func TestDecodeStatusRequest_EmptyBodyIsTheZeroRequest(t *testing.T) {
	r, err := protocol.DecodeStatusRequest(nil, 0)
	if err != nil || r.V != protocol.Version || r.Job != "" {
		t.Errorf("got %+v, %v", r, err)
	}
	if _, err := protocol.DecodeStatusRequest([]byte(`{"v":7}`), 0); protocol.Reason(err) != "version" {
		t.Errorf("v7 status request: %v", err)
	}
}

func TestCode_MapsReasonsToReplyCodes(t *testing.T) {
	_, err := protocol.DecodeLease([]byte(`{"v":9}`), 0)
	if protocol.Code(err) != protocol.CodeVersion {
		t.Errorf("code %s", protocol.Code(err))
	}
	_, err = protocol.DecodeLease([]byte(`{"v":1,"job":"x","action":"FLY","start":0,"expiry":1}`), 0)
	if protocol.Code(err) != protocol.CodeBadRequest {
		t.Errorf("code %s", protocol.Code(err))
	}
}

func TestSubjects_RoundTripJobIDs(t *testing.T) {
	s, err := protocol.NewSubjects("acme.shockwave")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Events("j-1"); got != "acme.shockwave.job.j-1.events" {
		t.Errorf("events subject %q", got)
	}
	if id, ok := s.EventsJob(s.Events("j-1")); !ok || id != "j-1" {
		t.Errorf("EventsJob = %q, %v", id, ok)
	}
	if id, ok := s.LeaseJob(s.Lease("j_2")); !ok || id != "j_2" {
		t.Errorf("LeaseJob = %q, %v", id, ok)
	}
	for _, bad := range []string{"acme.shockwave.job.a.b.events", "acme.shockwave.job.*.events", "other.job.a.events", "acme.shockwave.job.a.lease"} {
		if _, ok := s.EventsJob(bad); ok {
			t.Errorf("EventsJob(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "a..b", "a.*", "$SYS", "_INBOX.x", "a b", strings.Repeat("x", 200)} {
		if _, err := protocol.NewSubjects(bad); err == nil {
			t.Errorf("prefix %q accepted", bad)
		}
	}
}
