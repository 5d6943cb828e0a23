package coordinator

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shockwave-sched/shockwave/internal/wire"
	"github.com/shockwave-sched/shockwave/protocol"
)

// Caps on what one client can make the coordinator do.
//
// Registrations are admitted in the handler, before they reach the log: a
// new job id is refused when MaxJobs jobs are pending or active, or when its
// client registered MaxJobsPerClient new jobs already. (A job that registers
// again to resume is always admitted.) Events are budgeted in the fold, on
// the log's clock, so that a replay rejects exactly what the live service
// rejected: each known job may send eventBurst events at once and
// eventRate per second on average; the rest is rejected as rate_limited.

// Default caps.
const (
	DefaultMaxJobs          = 10_000
	DefaultMaxJobsPerClient = 4096

	eventRate  = protocol.EventRate  // events per second per job, on average
	eventBurst = protocol.EventBurst // events per job at once

	// Registrations (new or resumed) one client may send: registerBurst
	// at once, registerRate per second on average. An SDK registers once
	// per process and again after an outage.
	registerRate  = 10
	registerBurst = 64
	// maxClients bounds the per-client bookkeeping; past it, it restarts.
	maxClients = 100_000
)

func (c *ServiceConfig) validateLimits() error {
	if c.MaxJobs == 0 {
		c.MaxJobs = DefaultMaxJobs
	}
	if c.MaxJobsPerClient == 0 {
		c.MaxJobsPerClient = DefaultMaxJobsPerClient
	}
	if c.MaxJobs < 1 || c.MaxJobsPerClient < 1 {
		return fmt.Errorf("coordinator: job caps must be positive (max jobs %d, per client %d)", c.MaxJobs, c.MaxJobsPerClient)
	}
	if c.LeaderTTL < 0 {
		return fmt.Errorf("coordinator: leader ttl %v is negative", c.LeaderTTL)
	}
	return nil
}

// admission is the handlers' view of the job table, kept by the loop.
type admission struct {
	live  atomic.Int64 // pending and active jobs
	known sync.Map     // job ids registered successfully

	mu        sync.Mutex
	perClient map[string]int
	rate      map[string]*budget // registrations, on the wall clock
}

// learnKnown counts the pending and active jobs of the fold's state as
// known, so that their processes may register again while the job cap is
// reached: after a snapshot is restored (whose registrations are not
// replayed) and for submitted jobs, which no process registered yet.
func (s *Service) learnKnown() {
	c := s.fold.core
	if c == nil {
		return
	}
	for _, js := range [][]*job{c.active, c.pending} {
		for _, j := range js {
			s.admit.known.Store(j.view.ID, true)
		}
	}
	s.admit.live.Store(int64(len(c.active) + len(c.pending)))
}

// admit decides whether a registration of job from client may go to the
// log; it returns the refusal reason and error, or "" and nil.
func (s *Service) admitRegistration(client, job string) (string, error) {
	if client != "" {
		if err := s.admit.spendRegistration(client, time.Now()); err != nil {
			return "client_rate", err
		}
	}
	if _, ok := s.admit.known.Load(job); ok {
		return "", nil
	}
	if n := s.admit.live.Load(); n >= int64(s.cfg.MaxJobs) {
		return "too_many_jobs", fmt.Errorf("coordinator: %d jobs are pending or active, the cap (--max-jobs) is %d", n, s.cfg.MaxJobs)
	}
	if client == "" {
		return "", nil
	}
	s.admit.mu.Lock()
	defer s.admit.mu.Unlock()
	if len(s.admit.perClient) >= maxClients {
		clear(s.admit.perClient)
	}
	if n := s.admit.perClient[client]; n >= s.cfg.MaxJobsPerClient {
		return "client_cap", fmt.Errorf("coordinator: this client registered %d new jobs, the cap (--max-jobs-per-client) is %d", n, s.cfg.MaxJobsPerClient)
	}
	s.admit.perClient[client]++
	return "", nil
}

// spendRegistration takes one registration from client's budget.
func (a *admission) spendRegistration(client string, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rate == nil || len(a.rate) >= maxClients {
		a.rate = map[string]*budget{}
	}
	if !budgetOf(a.rate, client, seconds(now), registerBurst).take(seconds(now), registerRate, registerBurst, 1) {
		return fmt.Errorf("coordinator: this client sent more than %d registrations at once (%d/s on average); retry later", registerBurst, registerRate)
	}
	return nil
}

// budget is a token bucket: of a job's events (in log time), a client's
// registrations or a node's uplink messages (in wall time).
type budget struct {
	tokens float64
	at     float64 // time of the last refill
}

// budgetOf returns m's bucket for key, made full at t if it is new.
func budgetOf(m map[string]*budget, key string, t, burst float64) *budget {
	b := m[key]
	if b == nil {
		b = &budget{tokens: burst, at: t}
		m[key] = b
	}
	return b
}

// take refills b up to t at rate (at most burst), then takes n tokens if
// it holds them.
func (b *budget) take(t, rate, burst, n float64) bool {
	b.tokens = min(burst, b.tokens+(t-b.at)*rate)
	b.at = t
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// spend takes the events of the batch r from job's budget. Only jobs the
// Core knows get a budget (events of unknown jobs are rejected anyway), so
// the map is bounded by the job table.
func (f *fold) spend(job string, r record) error {
	if _, ok := f.core.jobs[job]; !ok {
		return nil
	}
	if !budgetOf(f.budgets, job, f.now, eventBurst).take(f.now, eventRate, eventBurst, float64(countEvents(r.Data))) {
		return fmt.Errorf("coordinator: job %s exceeded its event budget (%d events/s, bursts of %d)", job, eventRate, eventBurst)
	}
	return nil
}

// countEvents estimates the events of a batch cheaply (an upper bound: the
// occurrences of the "seq" key), at least 1.
func countEvents(data []byte) int {
	n := 0
	for i := 0; i+5 <= len(data); i++ {
		if data[i] == '"' && string(data[i:i+5]) == `"seq"` {
			n++
		}
	}
	return max(n, 1)
}

// appendFences writes the fold's state that is not Core's: the log's leader
// epoch and the event budgets, by job id (a snapshot restores them, so a
// replay after it rejects exactly what the live fold rejected).
func (img *foldImage) appendFences(e *wire.Encoder) {
	e.U64(img.epoch)
	slices.SortFunc(img.budgets, func(a, b budgetImage) int { return strings.Compare(a.job, b.job) })
	e.Len(len(img.budgets))
	for _, b := range img.budgets {
		e.Str(b.job)
		e.F64(b.b.tokens)
		e.F64(b.b.at)
	}
}

// loadFences reads what appendFences wrote.
func (f *fold) loadFences(d *wire.Decoder) {
	f.epoch = d.U64()
	n := d.Len(8 + 16)
	for range n {
		j := d.Str()
		b := &budget{tokens: d.F64(), at: d.F64()}
		if d.Err() != nil {
			return
		}
		if b.tokens < 0 || b.tokens > eventBurst || math.IsNaN(b.at) {
			d.Failf("event budget of %q out of range", j)
			return
		}
		f.budgets[j] = b
	}
}
