package sdk

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Environment variables of multi-process jobs and resident processes.
// RANK, WORLD_SIZE and LOCAL_RANK are torchrun's (and the node agent's).
const (
	EnvRank      = "RANK"
	EnvWorldSize = "WORLD_SIZE"
	EnvLocalRank = "LOCAL_RANK"
	EnvNode      = "SHOCKWAVE_NODE"            // the node a resident process lives on
	EnvVisible   = "SHOCKWAVE_VISIBLE_DEVICES" // its local device indices, comma-separated
)

// Defaults of the rank agreement.
const (
	DefaultRankTimeout     = 10 * time.Second // a rank silent this long is lost
	DefaultRankJoinTimeout = 2 * time.Minute  // every rank must have joined by then
	DefaultRankHeartbeat   = 250 * time.Millisecond
	DefaultRankLookahead   = 10 * time.Millisecond
)

// WithRank makes the process rank rank of a job of world processes (one
// per device; default from $RANK and $WORLD_SIZE, as torchrun sets them).
// Rank 0 registers the job and follows its leases; the other ranks attach
// to it (same job id and credentials) and follow rank 0. See the package
// doc, "Multi-process jobs".
func WithRank(rank, world int) Option {
	return func(o *options) error {
		if world < 1 || world > protocol.MaxWorldSize || rank < 0 || rank >= world {
			return fmt.Errorf("WithRank: rank %d of world size %d: want 0 <= rank < world <= %d", rank, world, protocol.MaxWorldSize)
		}
		o.rank, o.world, o.rankSet = rank, world, true
		return nil
	}
}

// WithLocalRank sets the rank's index among the ranks of its node (default
// $LOCAL_RANK, else 0): which of the node's granted devices is its own.
func WithLocalRank(n int) Option {
	return func(o *options) error {
		if n < 0 || n >= protocol.MaxWorkers {
			return fmt.Errorf("WithLocalRank: %d out of range [0, %d)", n, protocol.MaxWorkers)
		}
		o.localRank, o.localSet = n, true
		return nil
	}
}

// WithRankTimeout sets how long a rank may be silent before the others
// count it lost (default DefaultRankTimeout), and how long every rank must
// take at most to join (default DefaultRankJoinTimeout).
func WithRankTimeout(silent, join time.Duration) Option {
	return func(o *options) error {
		if silent < 10*time.Millisecond || join < silent {
			return fmt.Errorf("WithRankTimeout: want 10ms <= silent (%v) <= join (%v)", silent, join)
		}
		o.rankTimeout, o.rankJoin = silent, join
		return nil
	}
}

// WithRankLookahead sets how far ahead, in time at the measured step rate,
// rank 0 releases steps to the other ranks (default DefaultRankLookahead;
// at least one step). A stop takes effect at most this much plus one step
// after rank 0 learns of it.
func WithRankLookahead(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 || d > time.Minute {
			return fmt.Errorf("WithRankLookahead: %v out of range [0, 1m]", d)
		}
		o.lookahead = d
		return nil
	}
}

// WithNode says the process is resident on node name (it suspends in
// place): the coordinator grants it devices on that node only. Default
// $SHOCKWAVE_NODE, except in EXIT mode (a restarted process may run on
// any node).
func WithNode(name string) Option {
	return func(o *options) error {
		if err := protocol.ValidateNodeName("WithNode", "node", name); err != nil {
			return err
		}
		o.node = name
		return nil
	}
}

// WithVisibleDevices lists the local device indices a resident process
// can use on its node (default $SHOCKWAVE_VISIBLE_DEVICES, else
// $CUDA_VISIBLE_DEVICES when it lists indices; empty: every device).
func WithVisibleDevices(devices ...int) Option {
	return func(o *options) error {
		for _, d := range devices {
			if d < 0 || d >= protocol.MaxWorkers {
				return fmt.Errorf("WithVisibleDevices: device %d out of range [0, %d)", d, protocol.MaxWorkers)
			}
		}
		o.visible = append([]int(nil), devices...)
		return nil
	}
}

// rankDefaults fills the rank and node settings from the environment.
func (o *options) rankDefaults() error {
	if !o.rankSet {
		if ws := os.Getenv(EnvWorldSize); ws != "" {
			world, err := strconv.Atoi(ws)
			if err != nil {
				return fmt.Errorf("$%s=%q: not an integer", EnvWorldSize, ws)
			}
			rank, err := strconv.Atoi(os.Getenv(EnvRank))
			if err != nil {
				return fmt.Errorf("$%s=%q with $%s=%s: not an integer", EnvRank, os.Getenv(EnvRank), EnvWorldSize, ws)
			}
			if err := WithRank(rank, world)(o); err != nil {
				return fmt.Errorf("from $%s and $%s: %w", EnvRank, EnvWorldSize, err)
			}
		}
	}
	if o.world == 0 {
		o.world = 1
	}
	if !o.localSet {
		if lr := os.Getenv(EnvLocalRank); lr != "" {
			n, err := strconv.Atoi(lr)
			if err != nil || n < 0 || n >= protocol.MaxWorkers {
				return fmt.Errorf("$%s=%q: want an integer in [0, %d)", EnvLocalRank, lr, protocol.MaxWorkers)
			}
			o.localRank = n
		}
	}
	if o.workers == 0 {
		o.workers = o.world
	}
	if o.rankTimeout == 0 {
		o.rankTimeout, o.rankJoin = DefaultRankTimeout, DefaultRankJoinTimeout
	}
	if o.rankBeat == 0 {
		o.rankBeat = min(DefaultRankHeartbeat, o.rankTimeout/4)
	}
	if o.lookahead == 0 {
		o.lookahead = DefaultRankLookahead
	}
	if o.node == "" && !o.exitMode {
		if n := os.Getenv(EnvNode); n != "" {
			if err := WithNode(n)(o); err != nil {
				return fmt.Errorf("$%s: %w", EnvNode, err)
			}
		}
	}
	if o.node != "" && o.visible == nil {
		v, err := parseDevices(os.Getenv(EnvVisible))
		if err != nil {
			return fmt.Errorf("$%s: %w", EnvVisible, err)
		}
		if v == nil {
			v, _ = parseDevices(os.Getenv("CUDA_VISIBLE_DEVICES")) // UUIDs: not indices, ignored
		}
		o.visible = v
	}
	if o.node == "" && len(o.visible) > 0 {
		return errors.New("WithVisibleDevices without a node: pass WithNode or set $" + EnvNode)
	}
	return nil
}

// parseDevices reads a comma-separated list of device indices ("" is nil).
func parseDevices(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n >= protocol.MaxWorkers {
			return nil, fmt.Errorf("%q: want comma-separated device indices", s)
		}
		out = append(out, n)
	}
	return out, nil
}
