package main

import (
	"github.com/shockwave-sched/shockwave/topology"
)

// clusterFlags resolves the cluster flags every subcommand shares:
// `--nodes NxK` or `--cluster FILE`, either instead of `--gpus N` (one node
// of N, the flat pool). It returns an empty cluster when neither is given.
func clusterFlags(nodes, file string, gpusSet bool) (topology.Cluster, error) {
	switch {
	case nodes != "" && file != "":
		return topology.Cluster{}, badInput("--nodes and --cluster: give one of them")
	case (nodes != "" || file != "") && gpusSet:
		return topology.Cluster{}, badInput("--gpus with --nodes or --cluster: the cluster sets the GPU count; give one of them")
	case nodes != "":
		c, err := topology.ParseNodes(nodes)
		if err != nil {
			return c, badInput("--nodes: %v", err)
		}
		return c, nil
	case file != "":
		c, err := topology.Load(file)
		if err != nil {
			return c, badInput("--cluster: %v", err)
		}
		return c, nil
	}
	return topology.Cluster{}, nil
}
