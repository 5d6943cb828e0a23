//go:build !linux

package policy

// threadCPU is not measured outside Linux.
func threadCPU() int64 { return 0 }
