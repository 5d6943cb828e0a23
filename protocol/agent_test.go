package protocol_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

const goodSubmit = `{"v":1,"job":"train-1","name":"train","command":["python3","train.py","--lr","0.1"],"workers":2,"env":["LR=0.1","EMPTY="],"ranks_per_node":2,"max_retries":3}`

func TestDecodeSubmit_AcceptsAValidSubmission(t *testing.T) {
	s, err := protocol.DecodeSubmit([]byte(goodSubmit), 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Job != "train-1" || s.Workers != 2 || len(s.Command) != 4 || s.RanksPerNode != 2 || s.MaxRetries != 3 {
		t.Errorf("decoded %+v", s)
	}
}

func TestDecodeSubmit_RefusesBadInputNamingTheField(t *testing.T) {
	for _, c := range []struct{ name, from, to, mention string }{
		{"empty command", `["python3","train.py","--lr","0.1"]`, `[]`, "empty command"},
		{"empty program", `["python3","train.py","--lr","0.1"]`, `[""]`, "empty command"},
		{"NUL in an argument", `"--lr"`, `"--l\u0000r"`, "NUL"},
		{"zero width", `"workers":2`, `"workers":0`, "workers"},
		{"env without =", `"LR=0.1"`, `"LR"`, "KEY=VALUE"},
		{"env name", `"LR=0.1"`, `"1LR=0.1"`, "variable name"},
		{"reserved env", `"LR=0.1"`, `"CUDA_VISIBLE_DEVICES=0"`, "reserved"},
		{"job identity", `"LR=0.1"`, `"SHOCKWAVE_JOB_ID=other"`, "reserved"},
		{"ranks not dividing", `"ranks_per_node":2`, `"ranks_per_node":3`, "ranks_per_node"},
		{"negative retries", `"max_retries":3`, `"max_retries":-1`, "max_retries"},
		{"bad id", `"train-1"`, `"a.b"`, "job id"},
		{"unknown field", `"v":1`, `"v":1,"gpus":2`, "unknown field"},
	} {
		_, err := protocol.DecodeSubmit([]byte(strings.Replace(goodSubmit, c.from, c.to, 1)), 0)
		if err == nil || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.mention)
		}
	}
}

func TestDecodeAgentMessages_RefuseBadInput(t *testing.T) {
	if _, err := protocol.DecodeAgentHello([]byte(`{"v":1,"node":"n-1","gpus":8,"type":"a100","addr":"10.0.0.1"}`), 0); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"v":1,"node":"n.1","gpus":8}`, `{"v":1,"node":"n","gpus":0}`, `{"v":1,"node":"n","gpus":8,"addr":"a b"}`,
		`{"v":2,"node":"n","gpus":8}`,
	} {
		if _, err := protocol.DecodeAgentHello([]byte(bad), 0); err == nil {
			t.Errorf("hello %s accepted", bad)
		}
	}
	for _, bad := range []string{
		`{"v":1,"node":"n","job":"j","attempt":0,"since":0,"event":"crashed","code":1}`,
		`{"v":1,"node":"n","job":"j","attempt":0,"since":0,"event":"exited","code":300}`,
		`{"v":1,"node":"n","job":"j","attempt":-1,"since":0,"event":"exited","code":1}`,
	} {
		if _, err := protocol.DecodeAgentReport([]byte(bad), 0); err == nil {
			t.Errorf("report %s accepted", bad)
		}
	}
	good := `{"v":1,"node":"n","round":3,"now":100,"jobs":[{"job":"j","attempt":0,"since":2,"command":["x"],"devices":[0,1],"procs":2,"rank_offset":0,"world_size":2,"master_addr":"h","master_port":29500,"expiry":110}]}`
	if _, err := protocol.DecodeNodeDesired([]byte(good), 0); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		strings.Replace(good, `"procs":2`, `"procs":3`, 1),
		strings.Replace(good, `"world_size":2`, `"world_size":1`, 1),
		strings.Replace(good, `"command":["x"]`, `"command":[]`, 1),
	} {
		if _, err := protocol.DecodeNodeDesired([]byte(bad), 0); err == nil {
			t.Errorf("desired state %s accepted", bad)
		}
	}
}

func TestNodeDesired_AnAssignmentsLeaseMustBeTheJobsRunLease(t *testing.T) {
	const base = `{"v":1,"node":"n","round":3,"now":100,"jobs":[{"job":"j","attempt":0,"since":2,"command":["x"],"devices":[0],"procs":1,"rank_offset":0,"world_size":1,"master_addr":"h","master_port":29500,"expiry":110,"lease":%s}]}`
	good := `{"v":1,"job":"j","round":3,"action":"RUN","workers":[4],"devices":[{"node":"n","devices":[0]}],"start":100,"expiry":120}`
	d, err := protocol.DecodeNodeDesired([]byte(fmt.Sprintf(base, good)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := d.Jobs[0].Lease; l == nil || l.Job != "j" || l.Expiry != 120 {
		t.Fatalf("lease decoded as %+v", l)
	}
	for name, bad := range map[string]string{
		"another job's":  strings.Replace(good, `"job":"j"`, `"job":"k"`, 1),
		"a SUSPEND":      strings.Replace(good, `"RUN"`, `"SUSPEND"`, 1),
		"no workers":     strings.Replace(good, `"workers":[4]`, `"workers":[]`, 1),
		"unknown fields": strings.Replace(good, `"round":3`, `"round":3,"extra":1`, 1),
	} {
		_, err := protocol.DecodeNodeDesired([]byte(fmt.Sprintf(base, bad)), 0)
		if err == nil || !strings.Contains(err.Error(), "lease") {
			t.Errorf("%s lease: error %v, want one naming the lease", name, err)
		}
	}
	for _, key := range []string{protocol.EnvLeaseFD, "SHOCKWAVE_ATTEMPT"} {
		if err := protocol.ValidateEnv("submit", "env[0]", key+"=3"); err == nil {
			t.Errorf("a submission may set %s", key)
		}
	}
}

// TestNodeDesired_ResidentsAreOneRunLeasePerJob: the residents' leases
// of a desired state are valid RUN leases, one per job.
func TestNodeDesired_ResidentsAreOneRunLeasePerJob(t *testing.T) {
	const base = `{"v":1,"node":"n","round":3,"now":100,"jobs":[],"residents":[%s]}`
	good := `{"v":1,"job":"r","round":3,"action":"RUN","workers":[0],"devices":[{"node":"n","devices":[0]}],"start":100,"expiry":120}`
	d, err := protocol.DecodeNodeDesired([]byte(fmt.Sprintf(base, good+","+strings.Replace(good, `"job":"r"`, `"job":"s"`, 1))), 0)
	if err != nil || len(d.Residents) != 2 || d.Residents[1].Job != "s" {
		t.Fatalf("residents decoded as %+v, %v", d, err)
	}
	for name, bad := range map[string]string{
		"a SUSPEND":      strings.Replace(good, `"RUN"`, `"SUSPEND"`, 1),
		"one job twice":  good + "," + good,
		"no job":         strings.Replace(good, `"job":"r"`, `"job":""`, 1),
		"unknown fields": strings.Replace(good, `"round":3`, `"round":3,"extra":1`, 1),
	} {
		_, err := protocol.DecodeNodeDesired([]byte(fmt.Sprintf(base, bad)), 0)
		if err == nil || !strings.Contains(err.Error(), "residents") && !strings.Contains(err.Error(), "extra") {
			t.Errorf("%s: error %v, want one naming the residents", name, err)
		}
	}
}

func TestAgentSubject_SplitsNodeAndVerb(t *testing.T) {
	s, _ := protocol.NewSubjects("acme")
	if n, v, ok := s.AgentSubject(s.AgentReport("gpu-7")); !ok || n != "gpu-7" || v != "report" {
		t.Errorf("got %q %q %v", n, v, ok)
	}
	for _, bad := range []string{"acme.agent.gpu-7.shutdown", "acme.agent.*.join", "other.agent.n.join", "acme.agent.n"} {
		if _, _, ok := s.AgentSubject(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzDecodeSubmit(f *testing.F) {
	f.Add([]byte(goodSubmit))
	fuzzDecoder(f, protocol.DecodeSubmit, (*protocol.Submit).Validate)
}

func FuzzDecodeAgentReport(f *testing.F) {
	f.Add([]byte(`{"v":1,"node":"n","job":"j","attempt":1,"since":3,"event":"exited","code":1,"detail":"x"}`))
	fuzzDecoder(f, protocol.DecodeAgentReport, (*protocol.AgentReport).Validate)
}

func FuzzDecodeNodeDesired(f *testing.F) {
	f.Add([]byte(`{"v":1,"node":"n","round":3,"now":100,"jobs":[{"job":"j","attempt":0,"since":2,"command":["x"],"devices":[0,1],"procs":2,"rank_offset":0,"world_size":2,"master_addr":"h","master_port":29500,"expiry":110}]}`))
	fuzzDecoder(f, protocol.DecodeNodeDesired, (*protocol.NodeDesired).Validate)
}
