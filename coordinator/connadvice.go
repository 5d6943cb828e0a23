package coordinator

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Connection advice for the embedded server. Every client of the server
// costs it a connection: two goroutines, buffers and, for a job, subject
// trees built from its permissions (docs/scale.md, sessions 15 and 21). On
// 2 cores the embedded server met the live targets (event → state p99
// under 10 ms, tick → last lease p99 under 100 ms, RSS under 1 GB) with
// up to 7,000 jobs each holding its own connection and missed from 8,000
// on (docs/scale.md, session 25); jobs that reach the coordinator through
// their node's agent (the job socket) hold no connection, and 10,000 of
// them met the targets. So the server logs a warning when its connections
// pass DefaultConnectionsAdvice, once each time it passes it, naming the
// two deployments that carry more: the jobs under node agents, or NATS on
// machines of its own (--nats-url). The count is also a metric
// (shockwave_nats_connections).

// DefaultConnectionsAdvice is the number of client connections of the
// embedded server past which it advises another deployment.
const DefaultConnectionsAdvice = 7000

// connAdviceRearm is the share of the advice's level the count must fall
// under before passing the level warns again.
const connAdviceRearm = 0.9

// connAdvice remembers whether the count has passed the level since it
// was last under the rearm share of it.
type connAdvice struct {
	level  int
	warned atomic.Bool
}

// observe takes a reading of n connections and says whether it should warn.
func (a *connAdvice) observe(n int) bool {
	if a.level <= 0 {
		return false
	}
	switch {
	case n > a.level && !a.warned.Load():
		a.warned.Store(true)
		return true
	case float64(n) < connAdviceRearm*float64(a.level):
		a.warned.Store(false)
	}
	return false
}

// Connections is the number of client connections the server holds now,
// the coordinator's own included.
func (e *Embedded) Connections() int { return e.Server.NumClients() }

// advise reads the connection count and logs the advice when it passes
// the level (watch calls it every floodEvery).
func (e *Embedded) advise() {
	n := e.Connections()
	if e.advice.observe(n) && e.log != nil {
		e.log.Warn().Int("connections", n).Int("advised_max", e.advice.level).
			Msg("the embedded NATS server holds more connections than it was measured to serve within the live targets (docs/scale.md); " +
				"run the jobs under node agents, whose job socket carries their traffic, or run NATS on machines of its own and point --nats-url at it")
	}
}

// EmbeddedMetrics are the embedded server's series for a registry: the
// flood guard's disconnections and the client connections. Their values
// are read from e at scrape time.
func EmbeddedMetrics(e *Embedded) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "shockwave_flood_disconnects_total",
			Help: "Job connections the embedded server's flood guard disconnected (--flood-limit)."},
			func() float64 { return float64(e.FloodDisconnects()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "shockwave_nats_connections",
			Help: "Client connections the embedded NATS server holds: jobs', agents', tools' and the coordinator's own (--connections-advice)."},
			func() float64 { return float64(e.Connections()) }),
	}
}
