package pollux

// freeGPUs returns each node's free GPUs given the allocations that stay.
func freeGPUs(cl *Cluster, keep [][]int) []int {
	free := append([]int(nil), cl.Capacity...)
	for _, a := range keep {
		for _, n := range a {
			free[n]--
		}
	}
	return free
}

// placeMostFree takes want GPUs for one job, repeatedly from the node with
// the most free GPUs (the lowest index on a tie), min(free, still needed)
// at a time, and returns the node list grouped by node (spec §6.2, §6.3).
func placeMostFree(free []int, want int) []int {
	out := make([]int, 0, want)
	for len(out) < want {
		best := 0
		for n := range free {
			if free[n] > free[best] {
				best = n
			}
		}
		if free[best] <= 0 {
			return nil
		}
		k := min(free[best], want-len(out))
		for range k {
			out = append(out, best)
		}
		free[best] -= k
	}
	return out
}
