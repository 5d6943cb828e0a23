// Command gen writes throughputs_table.go, the built-in isolated throughput
// tables of package workload, from the original Shockwave throughput files
// (spec §2.2). Run it through go generate in sim/workload:
//
//	go generate ./sim/workload
//
// It reads <data>/tacc_throughputs.json and <data>/wisr_throughputs.json,
// where <data> is -data or, by default, the shared reference directory
// (../shared/data beside the checkout, or $SHOCKWAVE_SHARED_DATA).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
	"github.com/shockwave-sched/shockwave/sim/workload/internal/thrtable"
)

func main() {
	data := flag.String("data", "", "directory holding the throughput JSON files (default: the shared reference data)")
	out := flag.String("out", "throughputs_table.go", "Go file to write")
	pkg := flag.String("pkg", "workload", "package name of the generated file")
	flag.Parse()
	if *data == "" {
		*data = shareddata.Find()
	}
	if *data == "" {
		fmt.Fprintf(os.Stderr, "gen: reference data not found: pass -data or set $%s\n", shareddata.EnvVar)
		os.Exit(1)
	}
	src, err := thrtable.Generate(*data, *pkg)
	if err == nil {
		err = os.WriteFile(*out, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
