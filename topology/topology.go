// Package topology describes a GPU cluster as a set of nodes: each has a
// name, a GPU count and a GPU type (a free-form label for now). It parses the
// command-line forms every subcommand shares (`--gpus N`, `--nodes NxK`,
// `--cluster FILE`) and converts between cluster-wide GPU ids and
// (node, local device) pairs.
//
// Cluster-wide ids number the devices node by node in the cluster's order:
// node 0's devices are 0…K0-1, node 1's are K0…K0+K1-1, and so on. A flat
// pool of N GPUs is one node of N, so the ids of the flat pool are unchanged.
//
// The package is pure: no I/O except Load, which reads one file.
package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Limits on what a cluster description may hold.
const (
	MaxNodes       = 65536
	MaxGPUsPerNode = 1024
	MaxGPUs        = 1 << 20
)

// Node is one machine of the cluster.
type Node struct {
	Name string `json:"name"`           // unique; one NATS subject token
	GPUs int    `json:"gpus"`           // devices on the node, indexed 0…GPUs-1
	Type string `json:"type,omitempty"` // GPU type label, e.g. "v100"
}

// Cluster is an ordered set of nodes. The zero value is an empty cluster.
type Cluster struct {
	Nodes []Node `json:"nodes"`
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidName reports whether s may name a node (letters, digits, '-' and
// '_', 1 to 64 characters: safe as a NATS subject token and a file name).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Flat is a cluster of one node, "node-0", with n GPUs: the flat pool.
func Flat(n int) Cluster { return Uniform(1, n) }

// Uniform is a cluster of n nodes of k GPUs each, named node-0…node-(n-1).
func Uniform(n, k int) Cluster {
	c := Cluster{Nodes: make([]Node, n)}
	for i := range c.Nodes {
		c.Nodes[i] = Node{Name: "node-" + strconv.Itoa(i), GPUs: k}
	}
	return c
}

// ParseNodes parses "NxK" (N nodes of K GPUs each, e.g. "4x8").
func ParseNodes(s string) (Cluster, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "x")
	if !ok {
		return Cluster{}, fmt.Errorf("topology: nodes %q: want NxK, e.g. 4x8", s)
	}
	n, err1 := strconv.Atoi(a)
	k, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil {
		return Cluster{}, fmt.Errorf("topology: nodes %q: want NxK with integers, e.g. 4x8", s)
	}
	c := Uniform(max(n, 0), max(k, 0))
	if n <= 0 || k <= 0 {
		return Cluster{}, fmt.Errorf("topology: nodes %q: node count and GPUs per node must be positive", s)
	}
	if err := c.Validate(); err != nil {
		return Cluster{}, err
	}
	return c, nil
}

// Decode reads a cluster description: {"nodes":[{"name":…,"gpus":…,"type":…}]}.
// Unknown fields are refused.
func Decode(data []byte) (Cluster, error) {
	var c Cluster
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Cluster{}, fmt.Errorf("topology: cluster description: %w", err)
	}
	if dec.More() {
		return Cluster{}, errors.New("topology: cluster description: trailing data after the JSON object")
	}
	if err := c.Validate(); err != nil {
		return Cluster{}, err
	}
	return c, nil
}

// Load reads and validates a cluster description file (see Decode).
func Load(path string) (Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Cluster{}, fmt.Errorf("topology: %w", err)
	}
	c, err := Decode(data)
	if err != nil {
		return Cluster{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Validate checks names (valid, unique), GPU counts (1…MaxGPUsPerNode) and
// totals.
func (c Cluster) Validate() error {
	if len(c.Nodes) == 0 {
		return errors.New("topology: the cluster has no nodes")
	}
	if len(c.Nodes) > MaxNodes {
		return fmt.Errorf("topology: %d nodes, at most %d", len(c.Nodes), MaxNodes)
	}
	seen := make(map[string]bool, len(c.Nodes))
	total := 0
	for i, n := range c.Nodes {
		if !ValidName(n.Name) {
			return fmt.Errorf("topology: node %d: name %q: use 1-64 letters, digits, '-' or '_'", i, n.Name)
		}
		if seen[n.Name] {
			return fmt.Errorf("topology: node %d: name %q used twice", i, n.Name)
		}
		seen[n.Name] = true
		if n.GPUs <= 0 || n.GPUs > MaxGPUsPerNode {
			return fmt.Errorf("topology: node %q: %d GPUs, want 1..%d", n.Name, n.GPUs, MaxGPUsPerNode)
		}
		if len(n.Type) > 64 {
			return fmt.Errorf("topology: node %q: type label longer than 64 bytes", n.Name)
		}
		total += n.GPUs
	}
	if total > MaxGPUs {
		return fmt.Errorf("topology: %d GPUs in all, at most %d", total, MaxGPUs)
	}
	return nil
}

// GPUs is the total device count.
func (c Cluster) GPUs() int {
	t := 0
	for _, n := range c.Nodes {
		t += n.GPUs
	}
	return t
}

// MaxPerNode is the largest node's GPU count.
func (c Cluster) MaxPerNode() int {
	m := 0
	for _, n := range c.Nodes {
		m = max(m, n.GPUs)
	}
	return m
}

// Index returns the position of the named node, or -1.
func (c Cluster) Index(name string) int {
	for i, n := range c.Nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// Offsets returns each node's first cluster-wide GPU id.
func (c Cluster) Offsets() []int {
	off := make([]int, len(c.Nodes))
	t := 0
	for i, n := range c.Nodes {
		off[i] = t
		t += n.GPUs
	}
	return off
}

// Locate converts a cluster-wide GPU id to (node index, local device index).
func (c Cluster) Locate(id int) (node, local int, ok bool) {
	if id < 0 {
		return 0, 0, false
	}
	for i, n := range c.Nodes {
		if id < n.GPUs {
			return i, id, true
		}
		id -= n.GPUs
	}
	return 0, 0, false
}

// String is the short form: "4x8" for a uniform untyped cluster, else the
// node list as name:gpus[:type] joined by commas.
func (c Cluster) String() string {
	uniform := len(c.Nodes) > 0
	for _, n := range c.Nodes {
		if n.GPUs != c.Nodes[0].GPUs || n.Type != "" {
			uniform = false
		}
	}
	if uniform {
		u := Uniform(len(c.Nodes), c.Nodes[0].GPUs)
		same := true
		for i := range c.Nodes {
			same = same && c.Nodes[i].Name == u.Nodes[i].Name
		}
		if same {
			return fmt.Sprintf("%dx%d", len(c.Nodes), c.Nodes[0].GPUs)
		}
	}
	parts := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		parts[i] = n.Name + ":" + strconv.Itoa(n.GPUs)
		if n.Type != "" {
			parts[i] += ":" + n.Type
		}
	}
	return strings.Join(parts, ",")
}
