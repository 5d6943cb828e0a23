package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// lateJobGetsAGPU runs the policy on 2 GPUs with one job, registers a
// second once the first runs, and reports whether the second got a RUN
// lease within 20 rounds.
func lateJobGetsAGPU(t *testing.T, pol string, reallocate bool) (*env, bool) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Policy = pol
		s.PolicyOptions.ReallocateOnChange = reallocate
	})
	nc := e.client()
	leases := watchLeases(t, nc, e.subj.AllLeases())
	_, stopEarly := startJobs(t, nc, e.subj, []string{"early"}, 1)
	defer stopEarly()
	eventually(t, 10*time.Second, "the first job runs", func() bool {
		_, ok := leases.find(func(l *protocol.Lease) bool { return l.Job == "early" && l.Action == protocol.Run })
		return ok
	})
	rounds := e.svc.Health().Rounds
	eventually(t, 10*time.Second, "two more rounds", func() bool { return e.svc.Health().Rounds >= rounds+2 })
	_, stopLate := startJobs(t, nc, e.subj, []string{"late"}, 1)
	defer stopLate()
	rounds = e.svc.Health().Rounds
	deadline := time.Now().Add(20 * time.Second)
	for e.svc.Health().Rounds < rounds+20 && time.Now().Before(deadline) {
		if _, ok := leases.find(func(l *protocol.Lease) bool { return l.Job == "late" && l.Action == protocol.Run }); ok {
			return e, true
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, ok := leases.find(func(l *protocol.Lease) bool { return l.Job == "late" && l.Action == protocol.Run })
	return e, ok
}

func TestService_ReallocateOnChangeGivesALateJobAnIdleGPUAtOnce(t *testing.T) {
	e, ok := lateJobGetsAGPU(t, "gavel", true)
	if !ok {
		t.Fatal("the late job got no GPU within 20 rounds although one was idle")
	}
	st := status(t, e.client(), e.subj)
	if r, _ := jobRow(st, "late"); r.State != "active" {
		t.Errorf("late job %+v", r)
	}
}

// gandiva_fair is driven by the Gavel round mechanism too: without the
// setting, a job registered after its first reset waited 1,000 s beside an
// idle GPU on a live coordinator, since the policy ignored the setting.
func TestService_ReallocateOnChangeGivesALateGandivaFairJobAnIdleGPUAtOnce(t *testing.T) {
	if _, ok := lateJobGetsAGPU(t, "gandiva_fair", true); !ok {
		t.Fatal("the late job got no GPU within 20 rounds although one was idle")
	}
}

func TestService_WithoutReallocateOnChangeALateJobWaitsForTheGavelReset(t *testing.T) {
	if _, ok := lateJobGetsAGPU(t, "gavel", false); ok {
		t.Fatal("the late job ran before the 1,000 s re-allocation although the setting is off")
	}
}

func TestService_ALogWrittenWithAnotherReallocateSettingIsRefused(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Policy = "gavel"
		s.PolicyOptions.ReallocateOnChange = true
	})
	nc := e.stoppedConn()
	cfg := e.scfg
	cfg.PolicyOptions.ReallocateOnChange = false
	svc, err := NewService(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = svc.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "re-allocate on change true") {
		t.Fatalf("restart with the other setting: %v", err)
	}
}

// TestService_WithTheRuleUnsetALogGoesOnWithItsOwn: a coordinator whose
// re-allocation rule is only a default (ReallocateFromLog, the CLI without
// --reallocate-on-change) starts on a log written with the other rule and
// goes on with the log's, as a log written before gandiva_fair honoured the
// option must.
func TestService_WithTheRuleUnsetALogGoesOnWithItsOwn(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy = "gandiva_fair" })
	nc := e.stoppedConn()
	cfg := e.scfg
	cfg.PolicyOptions.ReallocateOnChange, cfg.ReallocateFromLog = true, true
	svc, done, cancel := startService(t, nc, cfg)
	eventually(t, 20*time.Second, "the coordinator serves on the older log", func() bool { return svc.Health().OK })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if svc.fold.cfg == nil || svc.fold.cfg.Reallocate {
		t.Fatalf("the log's rule: %+v, want re-allocate on change false (the log's own)", svc.fold.cfg)
	}
}

func TestServiceConfig_ReallocateOnChangeIsDroppedForPoliciesWithoutGavelRounds(t *testing.T) {
	for _, c := range []struct {
		policy string
		want   bool
	}{{"gavel", true}, {"max_min_fairness", true}, {"ossp", true}, {"gandiva_fair", true}, {"gandiva", true}, {"shockwave", false}} {
		cfg := ServiceConfig{Core: Config{GPUs: 1, RoundSeconds: 1}, Policy: c.policy,
			PolicyOptions: policy.Options{ReallocateOnChange: true}}
		if err := cfg.validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.PolicyOptions.ReallocateOnChange != c.want {
			t.Errorf("%s: ReallocateOnChange %v, want %v", c.policy, cfg.PolicyOptions.ReallocateOnChange, c.want)
		}
	}
}
