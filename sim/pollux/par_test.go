package pollux

import (
	"os"
	"runtime"
	"strconv"
)

// parallelism is the number of concurrent simulations a long test runs:
// $SHOCKWAVE_PARALLEL, else GOMAXPROCS.
func parallelism() int {
	if n, err := strconv.Atoi(os.Getenv("SHOCKWAVE_PARALLEL")); err == nil && n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}
