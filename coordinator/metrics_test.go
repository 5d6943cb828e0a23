package coordinator

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shockwave-sched/shockwave/policy"
)

func TestMetrics_ExposeRoundsLeasesEventsAndPerJobForecasts(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy = "shockwave" })
	srv := httptest.NewServer(Handler(e.reg, e.svc))
	defer srv.Close()
	nc := e.client()
	register(t, nc, e.subj, newJob("m1", 1))
	register(t, nc, e.subj, newJob("m2", 1))
	seq := uint64(0)
	eventually(t, 10*time.Second, "a few rounds", func() bool {
		seq++
		publishBatch(t, nc, e.subj, "m1", progress(seq, 10, int64(seq)*10, 0.01))
		publishBatch(t, nc, e.subj, "m2", heartbeat(seq, 0))
		time.Sleep(10 * time.Millisecond)
		return e.svc.Health().Rounds >= 4
	})
	publishBatch(t, nc, e.subj, "m1", progress(1, 1, 1, 1)) // out of order
	eventually(t, 5*time.Second, "the rejection is counted", func() bool {
		return counterValue(t, e.reg, "shockwave_events_rejected_total", "reason", "out_of_order") == 1
	})
	body := get(t, srv.URL+"/metrics", http.StatusOK)
	for _, want := range []string{
		`shockwave_jobs{state="active"} 2`,
		"shockwave_rounds_total",
		"shockwave_solve_seconds_bucket",
		"shockwave_tick_to_last_lease_seconds_bucket",
		`shockwave_leases_granted_total{kind="new"}`,
		"shockwave_events_accepted_total",
		`shockwave_events_rejected_total{reason="out_of_order"} 1`,
		`shockwave_registrations_total{result="new"} 2`,
		"shockwave_event_apply_lag_seconds_bucket",
		`shockwave_job_rho{job="m1"}`,
		`shockwave_job_forecast_remaining_seconds{job="m2"}`,
		`shockwave_jobs_rho{quantile="0.5"}`,
		`shockwave_jobs_rho{quantile="1"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	var h Health
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/healthz", http.StatusOK)), &h); err != nil || !h.OK || h.Rounds < 4 {
		t.Errorf("healthz %+v, %v", h, err)
	}
	e.stopService()
	e.emb.Shutdown()
	e.emb = nil
	get(t, srv.URL+"/healthz", http.StatusServiceUnavailable)
}

func get(t *testing.T, url string, code int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code {
		t.Errorf("GET %s: %d, want %d: %s", url, resp.StatusCode, code, b)
	}
	return string(b)
}

// TestMetrics_PerJobSeriesGoToTheJobsFurthestFromTheirShare: with a limit,
// only the jobs with the highest projected ρ have per-job series (ties by
// id), a job that drops out of them loses its series, the quantiles of ρ
// cover every job, and a negative limit leaves no per-job series.
func TestMetrics_PerJobSeriesGoToTheJobsFurthestFromTheirShare(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	round := func(rhos map[string]float64) *Round {
		p := &policy.Plan{}
		for _, id := range slices.Sorted(maps.Keys(rhos)) {
			p.Explain = append(p.Explain, policy.Explanation{Job: id, ProjectedRho: rhos[id], ForecastRemaining: 10 * rhos[id]})
		}
		return &Round{Plan: p}
	}
	series := func() (jobs []string, quantiles map[string]float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		quantiles = map[string]float64{}
		for _, mf := range mfs {
			for _, mt := range mf.GetMetric() {
				switch mf.GetName() {
				case "shockwave_job_rho":
					jobs = append(jobs, mt.GetLabel()[0].GetValue())
				case "shockwave_jobs_rho":
					quantiles[mt.GetLabel()[0].GetValue()] = mt.GetGauge().GetValue()
				}
			}
		}
		slices.Sort(jobs)
		return jobs, quantiles
	}
	m.observeJobs(round(map[string]float64{"a": 1.5, "b": 0.9, "c": 2.5, "d": 1.5, "e": 0.2}), nil, 3)
	jobs, q := series()
	if !slices.Equal(jobs, []string{"a", "c", "d"}) {
		t.Errorf("per-job series for %v; want the three worst ρ: a, c, d", jobs)
	}
	if want := map[string]float64{"0.5": 1.5, "0.9": 2.5, "0.99": 2.5, "1": 2.5}; !maps.Equal(q, want) {
		t.Errorf("ρ quantiles %v, want %v", q, want)
	}
	m.observeJobs(round(map[string]float64{"a": 1.5, "b": 3, "c": 2.5, "d": 1.5, "e": 0.2}), nil, 3)
	if jobs, _ := series(); !slices.Equal(jobs, []string{"a", "b", "c"}) {
		t.Errorf("per-job series for %v; want a, b, c (b rose, d fell out: a ties with it and sorts first)", jobs)
	}
	m.observeJobs(round(map[string]float64{"a": 1.5, "b": 3}), nil, 3)
	if jobs, _ := series(); !slices.Equal(jobs, []string{"a", "b"}) {
		t.Errorf("per-job series for %v; want a, b: every job when they are fewer than the limit", jobs)
	}
	m.observeJobs(round(map[string]float64{"a": 1.5, "b": 3}), nil, -1)
	if jobs, q := series(); len(jobs) != 0 || q["1"] != 3 {
		t.Errorf("with no per-job series: %v, quantiles %v", jobs, q)
	}
	m.observeJobs(round(map[string]float64{"a": 0, "b": 0}), nil, 3) // not a market policy
	if _, q := series(); len(q) != 0 {
		t.Errorf("ρ quantiles %v without a ρ", q)
	}
}
