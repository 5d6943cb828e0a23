package coordinator

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/internal/headless"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// hostileModel is a model name a job may send; the page must show it as
// text and never run it.
const hostileModel = `<img src=x onerror="document.title='pwned'">`

// webCluster is a live coordinator (Shockwave on two nodes of one GPU each,
// 0.5 s rounds) with
// three jobs that report progress, and its HTTP handler.
func webCluster(t *testing.T) (*env, *httptest.Server) {
	t.Helper()
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Policy = "shockwave"
		s.Core.RoundSeconds = 0.5
		s.Core.Cluster = topology.Cluster{Nodes: []topology.Node{{Name: "gpu-a", GPUs: 1, Type: "v100"}, {Name: "gpu-b", GPUs: 1, Type: "a100"}}}
	})
	nc := e.client()
	jobs := []protocol.Register{newJob("resnet-a", 1), newJob("bert-b", 1), newJob("evil-c", 1)}
	jobs[1].Model = "BERT"
	jobs[2].Model = hostileModel
	for _, j := range jobs {
		if rep := register(t, nc, e.subj, j); rep.Error != nil {
			t.Fatal(rep.Error)
		}
	}
	reportProgress(t, nc, e.subj, jobs)
	srv := httptest.NewServer(Handler(e.reg, e.svc))
	t.Cleanup(srv.Close)
	return e, srv
}

// reportProgress sends each job's progress every 100 ms until the test ends.
func reportProgress(t *testing.T, nc *nats.Conn, subj protocol.Subjects, jobs []protocol.Register) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		seq := uint64(0)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			seq++
			for _, j := range jobs {
				ev := progress(seq, 1000, int64(seq)*1000, 0.1)
				ev.V, ev.Job = protocol.Version, j.Job
				data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: j.Job, Events: []protocol.Event{ev}})
				_ = nc.Publish(subj.Events(j.Job), data)
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

func getState(t *testing.T, srv *httptest.Server) WebState {
	t.Helper()
	res, err := http.Get(srv.URL + "/api/state")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/state: %s", res.Status)
	}
	var st WebState
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestWeb_StateHasTheJobTablePlanAndTheRoundsSinceStart(t *testing.T) {
	_, srv := webCluster(t)
	var st WebState
	eventually(t, 10*time.Second, "two rounds with leases", func() bool {
		st = getState(t, srv)
		return len(st.Rounds) >= 2 && len(st.Rounds[len(st.Rounds)-1].Run) > 0 && st.Status.Plan != nil
	})
	if len(st.Status.Jobs) != 3 || st.Status.GPUs != 2 || st.Status.Policy != "shockwave" {
		t.Errorf("status %+v", st.Status)
	}
	if n := st.Status.Nodes; len(n) != 2 || n[0].Name != "gpu-a" || n[1].Type != "a100" {
		t.Errorf("nodes %+v", n)
	}
	last := st.Rounds[len(st.Rounds)-1]
	for _, g := range last.Run {
		if len(g.GPUs) == 0 || len(g.Devices) != 1 || !strings.HasPrefix(g.Devices[0].Node, "gpu-") {
			t.Errorf("round %d grants %s GPUs %v on %+v", last.Round, g.Job, g.GPUs, g.Devices)
		}
	}
	for i := 1; i < len(st.Rounds); i++ {
		if st.Rounds[i].Round <= st.Rounds[i-1].Round {
			t.Errorf("rounds out of order: %d then %d", st.Rounds[i-1].Round, st.Rounds[i].Round)
		}
	}
}

// TestWeb_ALargeTableShowsTheJobsFurthestFromTheirShare: cut to n rows,
// the job table keeps the unfinished jobs with the highest projected ρ of
// the last plan (ties by id), then ended jobs; cut, the web state keeps
// the explanations and the grants of those alone and leaves the state it
// was given as it was; a table of n rows or fewer is the whole table in
// its own order.
// plannedCore is a Core of n jobs of 1 and 2 GPUs in turn under Shockwave
// on cluster, whose last plan came after job ended completed.
func plannedCore(t *testing.T, cluster topology.Cluster, n int, ended string) *Core {
	t.Helper()
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := 0
	c := coreWithJobs(t, cluster, p, n, 1000, func() int { w++; return 1 + w%2 })
	if _, err := c.Tick(0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EndJob(1, ended, Completed, "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tick(60); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestWeb_ALargeTableShowsTheJobsFurthestFromTheirShare(t *testing.T) {
	c := plannedCore(t, topology.Uniform(2, 2), 9, "job-8")
	unfinished := slices.Clone(c.LastPlan().Explain)
	slices.SortFunc(unfinished, func(a, b policy.Explanation) int {
		if a.ProjectedRho != b.ProjectedRho {
			return cmp.Compare(b.ProjectedRho, a.ProjectedRho)
		}
		return strings.Compare(a.Job, b.Job)
	})
	if len(unfinished) != 8 || unfinished[0].ProjectedRho == unfinished[7].ProjectedRho {
		t.Fatalf("the plan explains %d jobs, ρ %v to %v", len(unfinished), unfinished[0].ProjectedRho, unfinished[len(unfinished)-1].ProjectedRho)
	}
	rows, total := c.ShownJobs(3)
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.Job)
	}
	if want := []string{unfinished[0].Job, unfinished[1].Job, unfinished[2].Job}; !slices.Equal(ids, want) || total != 9 {
		t.Errorf("shown %v of %d; want %v of 9", ids, total, want)
	}
	if rows, _ := c.ShownJobs(8); rows[7].Job != unfinished[7].Job {
		t.Errorf("the eighth row is %s; want the last unfinished job, %s, before the ended one", rows[7].Job, unfinished[7].Job)
	}
	if rows, total := c.ShownJobs(9); !slices.EqualFunc(rows, c.Jobs(), func(a, b JobStatus) bool { return a.Job == b.Job }) || total != 9 {
		t.Errorf("a table within the limit is not the whole table in its order")
	}

	// Fewer explained jobs than shown: the rest of the table in its order.
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fresh := coreWithJobs(t, topology.Uniform(2, 2), p, 5, 1000, func() int { return 1 })
	if rows, total := fresh.ShownJobs(3); total != 5 || !slices.EqualFunc(rows, fresh.Jobs()[:3], func(a, b JobStatus) bool { return a.Job == b.Job }) {
		t.Errorf("before any plan: %v of %d; want the table's first three", rows, total)
	}
	q, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ends := coreWithJobs(t, topology.Uniform(2, 2), q, 4, 1000, func() int { return 1 })
	if _, err := ends.Tick(0); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"job-3", "job-1"} {
		if _, err := ends.EndJob(1, id, Completed, "done"); err != nil {
			t.Fatal(err)
		}
	}
	if rows, _ := ends.ShownJobs(3); len(rows) != 3 || rows[2].Job != "job-1" || rows[0].State != "active" || rows[1].State != "active" {
		t.Errorf("two unfinished and two ended jobs, three shown: %+v; want the unfinished two, then job-1", rows)
	}

	plan := &policy.Plan{Run: []string{"a", "b"}, Explain: []policy.Explanation{{Job: "a"}, {Job: "b"}, {Job: "c"}, {Job: "d"}}}
	rounds := []RoundSummary{{Round: 1, Run: []RoundGrant{{Job: "a"}, {Job: "d"}}}, {Round: 2, Run: []RoundGrant{{Job: "b"}, {Job: "c"}}}}
	st := WebState{Status: protocol.StatusReply{Jobs: []protocol.JobInfo{{Job: "b"}, {Job: "a"}}, Plan: plan}, Rounds: rounds, JobsTotal: 4}
	before, _ := json.Marshal(st)
	got := st.trim()
	var explained []string
	for _, e := range got.Status.Plan.Explain {
		explained = append(explained, e.Job)
	}
	if !slices.Equal(explained, []string{"a", "b"}) || !slices.Equal(got.Status.Plan.Run, plan.Run) {
		t.Errorf("plan explains %v, runs %v; want a and b", explained, got.Status.Plan.Run)
	}
	if len(got.Rounds) != 2 || len(got.Rounds[0].Run) != 1 || got.Rounds[0].Run[0].Job != "a" || len(got.Rounds[1].Run) != 1 || got.Rounds[1].Run[0].Job != "b" {
		t.Errorf("rounds %+v; want a's grant, then b's", got.Rounds)
	}
	if after, _ := json.Marshal(st); !bytes.Equal(before, after) {
		t.Errorf("trim changed the state it was given:\n%s\n%s", before, after)
	}
	st.JobsTotal = 2
	if whole := st.trim(); len(whole.Status.Plan.Explain) != 4 || len(whole.Rounds[0].Run) != 2 {
		t.Errorf("a whole table's state was trimmed: %+v", whole)
	}
}

// TestWeb_StateShowsTheJobsAskedFor: /api/state?jobs=N shows N jobs of the
// coordinator's and says how many there are; a count that is not a
// positive number is a 400 naming it.
func TestWeb_StateShowsTheJobsAskedFor(t *testing.T) {
	_, srv := webCluster(t)
	eventually(t, 10*time.Second, "a plan", func() bool { return getState(t, srv).Status.Plan != nil })
	res, err := http.Get(srv.URL + "/api/state?jobs=2")
	if err != nil {
		t.Fatal(err)
	}
	var st WebState
	err = json.NewDecoder(res.Body).Decode(&st)
	res.Body.Close()
	if err != nil || len(st.Status.Jobs) != 2 || st.JobsTotal != 3 {
		t.Fatalf("?jobs=2: %d jobs of %d (%v)", len(st.Status.Jobs), st.JobsTotal, err)
	}
	if all := getState(t, srv); len(all.Status.Jobs) != 3 || all.JobsTotal != 3 {
		t.Errorf("by default: %d jobs of %d", len(all.Status.Jobs), all.JobsTotal)
	}
	for _, bad := range []string{"0", "-1", "many"} {
		res, err := http.Get(srv.URL + "/api/state?jobs=" + bad)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "jobs=") {
			t.Errorf("?jobs=%s: %s %s", bad, res.Status, body)
		}
	}
}

func TestWeb_TimelineKeepsOnlyTheNewestRounds(t *testing.T) {
	var w webLog
	for i := range MaxWebRounds + 5 {
		w.add(&Round{Index: i, Leases: []protocol.Lease{{Job: "a", Action: protocol.Run, Workers: []int{0}}}}, time.Millisecond)
	}
	if len(w.rounds) != MaxWebRounds || w.rounds[0].Round != 5 || w.rounds[MaxWebRounds-1].Round != MaxWebRounds+4 {
		t.Errorf("kept %d rounds, %d..%d", len(w.rounds), w.rounds[0].Round, w.rounds[len(w.rounds)-1].Round)
	}
}

func TestWeb_PageIsEmbeddedReadOnlyAndConfinedToItsOrigin(t *testing.T) {
	_, srv := webCluster(t)
	for _, path := range []string{"/", "/app.js", "/style.css"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		csp := res.Header.Get("Content-Security-Policy")
		if res.StatusCode != http.StatusOK || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("GET %s: %s, CSP %q", path, res.Status, csp)
		}
	}
	for _, c := range []struct{ method, path string }{{"POST", "/"}, {"DELETE", "/api/state"}, {"PUT", "/app.js"}} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %s, want 405", c.method, c.path, res.Status)
		}
	}
	for _, path := range []string{"/web/app.js", "/../go.mod", "/index.html/x", "/nope"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusOK && path != "/index.html/x" {
			t.Errorf("GET %s: %s, want not found", path, res.Status)
		}
	}
}

// startBrowser starts headless Chromium, or skips the test when there is
// none, unless $SHOCKWAVE_REQUIRE_BROWSER is set (CI sets it).
func startBrowser(t *testing.T) *headless.Browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := headless.Start(ctx, 1280, 900)
	if errors.Is(err, headless.ErrNoBrowser) && os.Getenv("SHOCKWAVE_REQUIRE_BROWSER") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// screenshot takes a PNG, checks that it decodes at the page's size, and
// keeps it in $SHOCKWAVE_SCREENSHOTS (when set) for people to look at.
func screenshot(t *testing.T, ctx context.Context, b *headless.Browser, name string) []byte {
	t.Helper()
	shot, err := b.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X != 1280 || sz.Y != 900 {
		t.Errorf("screenshot is %v, want 1280x900", sz)
	}
	if dir := os.Getenv("SHOCKWAVE_SCREENSHOTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return shot
}

func TestWebView_RendersTheJobsOfARunningCoordinatorAndUpdatesAfterARound(t *testing.T) {
	b := startBrowser(t)
	_, srv := webCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.Navigate(ctx, srv.URL+"/"); err != nil {
		t.Fatal(err)
	}
	rendered := `document.querySelectorAll('#jobs tbody tr[data-job]').length === 3 &&
		document.querySelectorAll('#cluster .device.busy').length === 2 &&
		document.querySelectorAll('#timeline rect.ran').length > 0 &&
		document.querySelectorAll('#jobs svg.band rect.p1090').length === 3 &&
		document.querySelectorAll('#plan tbody tr').length === 3 &&
		[...document.querySelectorAll('#cluster .node')].map(n => n.dataset.node).join() === 'gpu-a,gpu-b'`
	if err := b.WaitFor(ctx, rendered); err != nil {
		t.Fatal(err)
	}
	var first struct {
		Round, Updates string
		Jobs           []string
		Model          string
		Images         int
		Title          string
	}
	if err := b.Eval(ctx, `({round: document.body.dataset.round, updates: document.body.dataset.updates,
		jobs: [...document.querySelectorAll('#jobs tbody tr')].map(r => r.dataset.job),
		model: document.querySelector('#jobs tr[data-job="evil-c"] td:nth-child(3)').textContent,
		images: document.images.length, title: document.title})`, &first); err != nil {
		t.Fatal(err)
	}
	if strings.Join(first.Jobs, ",") != "resnet-a,bert-b,evil-c" {
		t.Errorf("job rows %v", first.Jobs)
	}
	if first.Model != hostileModel || first.Images != 0 || first.Title != "Shockwave coordinator" {
		t.Errorf("a job's model name was interpreted as HTML: cell %q, %d images, title %q", first.Model, first.Images, first.Title)
	}
	shot1 := screenshot(t, ctx, b, "webview-1.png")
	// The same page, not reloaded, shows a later round once one has passed.
	later := `Number(document.body.dataset.round) > ` + first.Round + ` && Number(document.body.dataset.updates) > ` + first.Updates
	if err := b.WaitFor(ctx, later); err != nil {
		t.Fatal(err)
	}
	var header string
	if err := b.Eval(ctx, `document.getElementById('summary').textContent`, &header); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(header, "next round "+first.Round+" ") || !strings.Contains(header, "policy shockwave · 2 GPUs") {
		t.Errorf("header did not move past round %s: %q", first.Round, header)
	}
	shot2 := screenshot(t, ctx, b, "webview-2.png")
	if bytes.Equal(shot1, shot2) {
		t.Error("the page looks the same after a round")
	}
}
