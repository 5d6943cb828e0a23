package coordinator

import (
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// loadScraper gets a path of the service's HTTP handler every interval:
// /metrics as a Prometheus server would (SHOCKWAVE_LOAD_SCRAPE=DURATION in
// the load test), or /api/state as the web view does
// (SHOCKWAVE_LOAD_WEB=DURATION). The handler is the one `shockwave
// coordinator --http` serves, on the registry it builds (the service's
// metrics, the Go and process collectors), served in this process without
// the network.
type loadScraper struct {
	path string
	reg  *prometheus.Registry
	mu   sync.Mutex
	took []time.Duration
	size int
	stop chan struct{}
	done chan struct{}
}

// newLoadScraper returns a scraper and the registry the service's
// metrics go in.
func newLoadScraper(path string) *loadScraper {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &loadScraper{path: path, reg: reg, stop: make(chan struct{}), done: make(chan struct{})}
}

// start scrapes svc every interval until stopped.
func (l *loadScraper) start(svc *Service, interval time.Duration) {
	h := Handler(l.reg, svc)
	go func() {
		defer close(l.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
			rec := httptest.NewRecorder()
			start := time.Now()
			h.ServeHTTP(rec, httptest.NewRequest("GET", l.path, nil))
			took := time.Since(start)
			l.mu.Lock()
			l.took, l.size = append(l.took, took), rec.Body.Len()
			l.mu.Unlock()
		}
	}()
}

// report stops the scraper and logs what its scrapes took.
func (l *loadScraper) report(t *testing.T) {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.took) == 0 {
		t.Logf("%s: no request", l.path)
		return
	}
	s := slices.Sorted(slices.Values(l.took))
	t.Logf("%s requests: %d, p50 %v, max %v, %d bytes", l.path, len(s), s[len(s)/2], s[len(s)-1], l.size)
}
