package coordinator

import (
	"encoding/json"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// Metrics are the service's Prometheus metrics. Counters count what the live
// service did since it started; a replay after a restart counts nothing.
type Metrics struct {
	jobs        *prometheus.GaugeVec
	ended       *prometheus.CounterVec
	rounds      prometheus.Counter
	roundErrors prometheus.Counter
	solve       prometheus.Histogram
	tickToLease prometheus.Histogram
	// roundsCollected counts rounds a collection completed in (gchold.go).
	roundsCollected      prometheus.Counter
	granted              *prometheus.CounterVec
	revoked              *prometheus.CounterVec
	leasesCovered        prometheus.Counter
	leasesRelayed        prometheus.Counter
	leasesHeld           prometheus.Counter
	accepted             prometheus.Counter
	rejected             *prometheus.CounterVec
	registrations        *prometheus.CounterVec
	eventLag             prometheus.Histogram
	rho                  *prometheus.GaugeVec
	forecast             *prometheus.GaugeVec
	rhoQuantiles         *prometheus.GaugeVec // ρ over every active job, by quantile
	logSeq               prometheus.Gauge
	replaySeconds        prometheus.Gauge
	snapshotErrors       prometheus.Counter
	logWrites            *prometheus.CounterVec
	logConsumer          *prometheus.CounterVec // errors of the log's consumer, each followed by its recreation
	deposed              prometheus.Counter
	loopStep             *prometheus.HistogramVec
	carried              prometheus.Histogram // batches per carried record (carry.go)
	carriedRegistrations prometheus.Histogram // registrations per carried record (carryreg.go)
	snapshotMetrics

	labeled map[string]bool // jobs with per-job series
}

// NewMetrics creates the metrics and registers them with reg (nil: a new
// private registry, for tests and embedding).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	lat := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	m := &Metrics{
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shockwave_jobs", Help: "Jobs by state."}, []string{"state"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shockwave_jobs_ended_total",
			Help: "Jobs that ended (completed, failed, expired, cancelled) or were lost, by state, as the rounds report them; unlike shockwave_jobs, not bounded by the ended jobs the table keeps (--keep-ended)."}, []string{"state"}),
		rounds:               prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_rounds_total", Help: "Rounds scheduled."}),
		roundErrors:          prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_round_errors_total", Help: "Round ticks that failed (policy errors)."}),
		solve:                prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shockwave_solve_seconds", Help: "Time Core.Tick took: settling, the policy's allocation, placement.", Buckets: lat}),
		tickToLease:          prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shockwave_tick_to_last_lease_seconds", Help: "From the round timer to the last lease of the round flushed to NATS.", Buckets: lat}),
		roundsCollected:      prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_rounds_collected_total", Help: "Rounds in which the Go collector completed a cycle between the round timer and the last lease flushed (with --gc-hold, none should)."}),
		granted:              prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shockwave_leases_granted_total", Help: "RUN leases published, by kind (new or extension)."}, []string{"kind"}),
		revoked:              prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shockwave_leases_revoked_total", Help: "SUSPEND and EXIT leases published, by reason (preempted, lost, exit, resent: a SUSPEND sent again to a job that reported progress without a grant)."}, []string{"reason"}),
		leasesRelayed:        prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_leases_relayed_total", Help: "RUN and SUSPEND leases of rounds not published because the agent of the job's node relays them (AgentHello.Relay)."}),
		leasesHeld:           prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_leases_held_total", Help: "RUN and SUSPEND leases of rounds not published because no process of the submitted job has registered yet (its registration's reply carries the current lease)."}),
		leasesCovered:        prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_leases_covered_total", Help: "RUN renewals not sent because the lease the job holds from an earlier round still covers the round (lease rounds above 1)."}),
		accepted:             prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_events_accepted_total", Help: "Job events folded into the state."}),
		rejected:             prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shockwave_events_rejected_total", Help: "Job events and event batches rejected, by reason."}, []string{"reason"}),
		registrations:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shockwave_registrations_total", Help: "Registration requests, by result."}, []string{"result"}),
		eventLag:             prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shockwave_event_apply_lag_seconds", Help: "From a batch's storage in the log to its events applied.", Buckets: lat}),
		rho:                  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shockwave_job_rho", Help: "Projected finish-time fairness ρ of an active job (market policies)."}, []string{"job"}),
		forecast:             prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shockwave_job_forecast_remaining_seconds", Help: "Forecast remaining run time of an active job (market policies)."}, []string{"job"}),
		rhoQuantiles:         prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shockwave_jobs_rho", Help: "Projected finish-time fairness ρ over every active job after the last round, by quantile (0.5, 0.9, 0.99, 1: the worst; market policies)."}, []string{"quantile"}),
		logSeq:               prometheus.NewGauge(prometheus.GaugeOpts{Name: "shockwave_log_sequence", Help: "Last log record folded into the state."}),
		replaySeconds:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "shockwave_replay_seconds", Help: "How long the replay of the log took at start."}),
		snapshotErrors:       prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_snapshot_errors_total", Help: "Snapshots that could not be written, or replays that disagreed with the stored snapshot."}),
		logWrites:            prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shockwave_log_writes_total", Help: "Coordinator records written to the log, by result (ok, error, duplicate: another writer used the record's message id)."}, []string{"result"}),
		logConsumer:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "shockwave_log_consumer_errors_total", Help: "Errors of the coordinator's log consumer, by error (no_heartbeat: it stopped receiving for two heartbeats; consumer_deleted; other); the client recreates the consumer where it stopped."}, []string{"error"}),
		deposed:              prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_leader_deposed_total", Help: "Times this coordinator lost the leader lease while leading."}),
		loopStep:             prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shockwave_loop_step_seconds", Help: "How long one step held the service loop (a log record folded and what it published, a status reply, a round's tick or close), by kind; events wait meanwhile.", Buckets: lat}, []string{"kind"}),
		carried:              prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shockwave_carried_batches", Help: "Event batches per carried log record: the batches agents carry that the leader appends together (carry.go).", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		carriedRegistrations: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "shockwave_carried_registrations", Help: "Registrations per carried log record: the registrations the leader appends together (carryreg.go).", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		labeled:              map[string]bool{},
	}
	reg.MustRegister(m.carried, m.carriedRegistrations, m.jobs, m.ended, m.rounds, m.roundErrors, m.solve, m.tickToLease, m.roundsCollected, m.granted, m.revoked, m.leasesCovered, m.leasesRelayed, m.leasesHeld, m.accepted,
		m.rejected, m.registrations, m.eventLag, m.rho, m.forecast, m.rhoQuantiles, m.logSeq, m.replaySeconds, m.snapshotErrors,
		m.logWrites, m.logConsumer, m.deposed, m.loopStep)
	m.snapshotMetrics = newSnapshotMetrics(reg)
	return m
}

// observeEvents counts one folded batch.
func (m *Metrics) observeEvents(o *outcome, stored time.Time) {
	m.accepted.Add(float64(o.accepted))
	for _, r := range o.rejected {
		m.rejected.WithLabelValues(r).Inc()
	}
	m.eventLag.Observe(time.Since(stored).Seconds())
}

// observeEnded counts the jobs round r reports ended or lost.
func (m *Metrics) observeEnded(r *Round) {
	for _, e := range r.Ended {
		m.ended.WithLabelValues(string(e.State)).Inc()
	}
	if len(r.Lost) > 0 {
		m.ended.WithLabelValues(string(Lost)).Add(float64(len(r.Lost)))
	}
}

// observeRound counts a round and its solve time.
func (m *Metrics) observeRound(solve time.Duration) {
	m.rounds.Inc()
	m.solve.Observe(solve.Seconds())
}

// DefaultJobSeries is how many jobs have per-job series by default
// (ServiceConfig.JobSeries).
const DefaultJobSeries = 1000

// observeJobs refreshes the job gauges after round r (one goroutine at a
// time: the summary writer). Per-job series (ρ and the forecast) go to the
// limit jobs with the highest projected ρ, the ones furthest from their
// fair share (ties by job id); the quantiles of ρ cover every job. Each
// scrape encodes every series: at 10,000 jobs the two per-job series took
// a scrape 64–96 ms of the coordinator's CPU and 1.3 MB, and scrapes every
// 5 s took event → state p99 from 5–9 ms to 14 ms (docs/scale.md,
// session 20).
func (m *Metrics) observeJobs(r *Round, jobs []JobStatus, limit int) {
	byState := map[JobState]int{Pending: 0, Active: 0, Lost: 0, Completed: 0, Failed: 0, Expired: 0}
	for _, j := range jobs {
		byState[JobState(j.State)]++
	}
	for s, n := range byState {
		m.jobs.WithLabelValues(string(s)).Set(float64(n))
	}
	explain := r.Plan.Explain
	var rhos []float64
	for _, e := range explain {
		if e.ProjectedRho > 0 {
			rhos = append(rhos, e.ProjectedRho)
		}
	}
	m.observeRhos(rhos)
	labeled := worstRho(explain, limit)
	seen := make(map[string]bool, len(labeled))
	for i, e := range labeled {
		if i > 0 && i%jobsPerYield == 0 {
			runtime.Gosched() // off the loop, which may be waiting for the processor (yield.go)
		}
		seen[e.Job] = true
		m.labeled[e.Job] = true
		m.rho.WithLabelValues(e.Job).Set(e.ProjectedRho)
		m.forecast.WithLabelValues(e.Job).Set(e.ForecastRemaining)
	}
	for job := range m.labeled {
		if !seen[job] {
			m.rho.DeleteLabelValues(job)
			m.forecast.DeleteLabelValues(job)
			delete(m.labeled, job)
		}
	}
}

// worstRho is the limit explanations with the highest projected ρ (ties
// by job id), all of them when they are no more; none when limit is
// negative.
func worstRho(explain []policy.Explanation, limit int) []policy.Explanation {
	if limit < 0 {
		return nil
	}
	if len(explain) <= limit {
		return explain
	}
	return highestRho(explain, limit, nil)
}

// observeRhos sets the quantiles of ρ (none: the series are removed).
func (m *Metrics) observeRhos(rhos []float64) {
	qs := []struct {
		label string
		q     float64
	}{{"0.5", 0.5}, {"0.9", 0.9}, {"0.99", 0.99}, {"1", 1}}
	if len(rhos) == 0 {
		for _, q := range qs {
			m.rhoQuantiles.DeleteLabelValues(q.label)
		}
		return
	}
	slices.Sort(rhos)
	for _, q := range qs {
		i := min(len(rhos)-1, int(math.Ceil(q.q*float64(len(rhos))))-1)
		m.rhoQuantiles.WithLabelValues(q.label).Set(rhos[max(i, 0)])
	}
}

func (m *Metrics) observeLease(l *protocol.Lease) {
	switch {
	case l.Action == protocol.Run && l.Extension:
		m.granted.WithLabelValues("extension").Inc()
	case l.Action == protocol.Run:
		m.granted.WithLabelValues("new").Inc()
	case l.Action == protocol.Exit:
		m.revoked.WithLabelValues("exit").Inc()
	case strings.HasPrefix(l.Reason, "lost"):
		m.revoked.WithLabelValues("lost").Inc()
	case strings.HasPrefix(l.Reason, resuspendReason):
		m.revoked.WithLabelValues("resent").Inc()
	default:
		m.revoked.WithLabelValues("preempted").Inc()
	}
}

// Handler serves /metrics from gatherer (the registry the metrics were
// registered with), /healthz from the service (200 once it has replayed
// its log and while it is connected to NATS, 503 otherwise), and the web
// view at / with the state it polls at /api/state (web.go).
func Handler(gatherer prometheus.Gatherer, s *Service) http.Handler {
	mux := http.NewServeMux()
	mountWeb(mux, s)
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		h := s.Health()
		w.Header().Set("Content-Type", "application/json")
		if !h.OK {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(h)
	})
	return mux
}
