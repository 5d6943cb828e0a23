package coordinator

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The web view's page, script and style sheet, served from the binary. The
// charts are hand-drawn SVG (progress bars, forecast bands, the rounds
// timeline): each is a few rectangles, so no chart library is vendored.
//
//go:embed web
var webAssets embed.FS

// MaxWebRounds is how many recent rounds the web view's timeline keeps:
// those the page draws. Each round carries its grants, about 2,000 a round
// at 10,000 jobs, and every poll sends them all (docs/scale.md, session 20).
const MaxWebRounds = 80

// WebState is what the web view polls (GET /api/state): the status reply
// (its nodes and each job's devices included) and the newest rounds this
// coordinator scheduled (MaxWebRounds at most), oldest first.
type WebState struct {
	Status protocol.StatusReply `json:"status"`
	Rounds []RoundSummary       `json:"rounds"`
	// JobsTotal is how many jobs the coordinator knows; Status.Jobs holds
	// WebJobs of them at most (limit), the plan explains those, and the
	// rounds list their grants.
	JobsTotal int `json:"jobs_total"`
}

// WebJobs is how many jobs /api/state shows unless the request asks for
// another number (?jobs=N): at 10,000 jobs the whole state was 9.2 MB,
// 23–73 ms to encode every poll (docs/scale.md, session 20).
const WebJobs = 500

// trim leaves out of a state whose job table the loop cut (Core.ShownJobs)
// the plan's explanations and the rounds' grants of the jobs not shown. A
// whole table is returned as it is. It copies what it changes: the plan
// and the rounds are shared.
func (st WebState) trim() WebState {
	if st.JobsTotal <= len(st.Status.Jobs) {
		return st
	}
	shown := make(map[string]bool, len(st.Status.Jobs))
	for _, j := range st.Status.Jobs {
		shown[j.Job] = true
	}
	st.Status.Plan = explainOnly(st.Status.Plan, shown)
	rounds := make([]RoundSummary, len(st.Rounds))
	for i, r := range st.Rounds {
		r.Run = slices.DeleteFunc(slices.Clone(r.Run), func(g RoundGrant) bool { return !shown[g.Job] })
		rounds[i] = r
	}
	st.Rounds = rounds
	return st
}

// RoundSummary is one round of the web view's timeline.
type RoundSummary struct {
	Round  int     `json:"round"`
	Start  float64 `json:"start"` // coordinator clock, seconds since the Unix epoch
	Active int     `json:"active"`
	Solved bool    `json:"solved"`
	SolveS float64 `json:"solve_s"`
	// Run lists the jobs granted a RUN lease, with their GPUs.
	Run []RoundGrant `json:"run"`
}

// RoundGrant is one RUN lease of a round.
type RoundGrant struct {
	Job     string                 `json:"job"`
	GPUs    []int                  `json:"gpus"`
	Devices []protocol.NodeDevices `json:"devices,omitempty"`
}

// webLog is the loop's record of recent rounds; only the loop touches it.
type webLog struct {
	rounds []RoundSummary
}

// add records a live round, dropping the oldest beyond MaxWebRounds.
func (w *webLog) add(rd *Round, solve time.Duration) {
	sum := RoundSummary{Round: rd.Index, Start: rd.Start, Active: rd.Active, SolveS: solve.Seconds(), Run: []RoundGrant{}}
	if rd.Plan != nil {
		sum.Solved = rd.Plan.Solved
	}
	for _, l := range rd.Leases {
		if l.Action == protocol.Run {
			sum.Run = append(sum.Run, RoundGrant{Job: l.Job, GPUs: slices.Clone(l.Workers), Devices: slices.Clone(l.Devices)})
		}
	}
	if len(w.rounds) == MaxWebRounds {
		w.rounds = slices.Delete(w.rounds, 0, 1)
	}
	w.rounds = append(w.rounds, sum)
}

// WebState asks the loop for the web view's state; it fails when the loop
// does not answer before ctx ends or is too busy to queue the request.
// It shows jobs rows of the job table at most (Core.ShownJobs).
func (s *Service) WebState(ctx context.Context, jobs int) (WebState, error) {
	ch := make(chan WebState, 1)
	select {
	case s.statusq <- statusRequest{req: &protocol.StatusRequest{V: protocol.Version}, web: ch, shown: jobs}:
	default:
		return WebState{}, errors.New("coordinator busy; retry")
	}
	select {
	case st := <-ch:
		return st.trim(), nil
	case <-ctx.Done():
		return WebState{}, ctx.Err()
	}
}

// mountWeb serves the web view: the page at /, its assets, and the state it
// polls at /api/state. Everything is read-only; other methods get 405.
func mountWeb(mux *http.ServeMux, s *Service) {
	static, _ := fs.Sub(webAssets, "web")
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", secured(files))
	mux.Handle("GET /app.js", secured(files))
	mux.Handle("GET /style.css", secured(files))
	mux.Handle("GET /api/state", secured(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		n := WebJobs
		if v := r.URL.Query().Get("jobs"); v != "" {
			k, err := strconv.Atoi(v)
			if err != nil || k < 1 {
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(map[string]string{"error": fmt.Sprintf("jobs=%q: want a positive number of jobs to show", v)})
				return
			}
			n = k
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		st, err := s.WebState(ctx, n)
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	})))
}

// secured adds headers that keep the page to its own origin's script and
// style (no inline script, no third-party content) and out of frames.
func secured(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		h.ServeHTTP(w, r)
	})
}
