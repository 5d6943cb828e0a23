package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// Resizing. A coordinator restarted with another --gpus, --nodes or
// --cluster than its log was written with does not refuse to start: once
// it leads (and has folded the whole log), it appends a cluster record with
// the node list its flags describe, and the fold applies it as membership
// changes (Core.LeaveNode for nodes no longer listed, Core.JoinNode for new
// or changed ones). A replay therefore sees the resize at the same point of
// the log. Jobs that held devices a node no longer has lose their lease; a
// cluster that resized is dynamic (a gang wider than it waits). The other
// settings (round length, policy, timeouts, dynamic membership) still have to
// match the log. Logs with agent-managed (dynamic) membership are never
// resized from flags.

// logCluster is the subject of cluster records, below the prefix.
const logCluster = "log.cluster"

// kindCluster is the outcome kind of a cluster record.
const kindCluster = "cluster"

// clusterRecord is the cluster's node list from now on.
type clusterRecord struct {
	V     int             `json:"v"`
	Nodes []topology.Node `json:"nodes"`
}

func decodeClusterRecord(data []byte) (*clusterRecord, error) {
	var r clusterRecord
	if err := protocol.DecodeStrictJSON(data, &r); err != nil {
		return nil, fmt.Errorf("coordinator: cluster record: %w", err)
	}
	if r.V != protocol.Version {
		return nil, fmt.Errorf("coordinator: cluster record: version %d", r.V)
	}
	if err := (topology.Cluster{Nodes: r.Nodes}).Validate(); err != nil {
		return nil, fmt.Errorf("coordinator: cluster record: %w", err)
	}
	for _, n := range r.Nodes {
		if err := checkNode(n); err != nil {
			return nil, fmt.Errorf("coordinator: cluster record: %w", err)
		}
	}
	return &r, nil
}

// resize applies a cluster record: nodes not listed leave, listed nodes
// that are new or changed join.
func (f *fold) resize(r record) outcome {
	o := outcome{kind: kindCluster}
	rec, err := decodeClusterRecord(r.Data)
	if err != nil {
		o.reject("invalid", err)
		return o
	}
	current := f.core.Nodes()
	for _, n := range current {
		if !slices.ContainsFunc(rec.Nodes, func(m topology.Node) bool { return m.Name == n.Name }) {
			if err := f.core.LeaveNode(n.Name); err != nil {
				o.reject("invalid", err)
			}
		}
	}
	for _, n := range rec.Nodes {
		if i := slices.IndexFunc(current, func(m topology.Node) bool { return m.Name == n.Name }); i >= 0 && current[i] == n {
			continue
		}
		if err := f.core.JoinNode(n); err != nil {
			o.reject("invalid", err)
		}
	}
	return o
}

// sameRules compares two configurations but for the cluster's shape (GPU
// count and nodes), which a restart may change.
func sameRules(a, b *configRecord) bool {
	x, y := *a, *b
	x.GPUs, y.GPUs, x.Cluster, y.Cluster = 0, 0, nil, nil
	return sameConfig(&x, &y)
}

// wantedNodes is the node list the service's flags describe.
func (s *Service) wantedNodes() []topology.Node {
	if len(s.cfg.Core.Cluster.Nodes) > 0 {
		return s.cfg.Core.Cluster.Nodes
	}
	return topology.Flat(s.cfg.Core.GPUs).Nodes
}

// resizeIfNeeded runs in the loop when this coordinator goes live: it
// appends a cluster record when the flags describe another cluster than
// the log's.
func (s *Service) resizeIfNeeded(ctx context.Context) {
	c := s.fold.core
	if c == nil || s.fold.cfg == nil || s.fold.cfg.Dynamic || s.cfg.Core.Dynamic {
		return
	}
	want, have := s.wantedNodes(), c.Nodes()
	if slices.Equal(want, have) {
		return
	}
	s.log.Warn().Str("from", topology.Cluster{Nodes: have}.String()).Str("to", topology.Cluster{Nodes: want}.String()).
		Msg("the flags describe another cluster than the log's: resizing (a logged cluster event)")
	data, _ := jsonMarshal(clusterRecord{V: protocol.Version, Nodes: want})
	go func() {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := s.appendRetrying(actx, s.subj.Prefix+"."+logCluster, data); err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("cannot log the cluster resize")
		}
	}()
}
