package coordinator

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
