package pollux

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
)

// The built-in tables give the per-application constants of spec §1.5.
func TestBuiltinApps_ConstantsMatchSpecTable(t *testing.T) {
	apps := mustApps(t)
	want := map[string]struct {
		init, max, minL, maxL, epochs int
		finish                        float64
	}{
		"bert":        {12, 384, 4, 12, 2, 14774.0},
		"cifar10":     {128, 4096, 32, 1024, 100, 39062.908166595},
		"deepspeech2": {20, 640, 10, 80, 80, 28536.0},
		"imagenet":    {200, 12800, 20, 200, 90, 576525.594895604},
		"ncf":         {256, 32768, 32, 32768, 10, 194174.0},
		"yolov3":      {8, 512, 4, 8, 50, 103443.977962532},
	}
	if len(apps) != len(want) {
		t.Fatalf("%d applications, want %d", len(apps), len(want))
	}
	for name, w := range want {
		a := apps[name]
		if a == nil {
			t.Fatalf("application %s missing", name)
		}
		got := [5]int{a.InitBsz, a.MaxBsz, a.MinLocal, a.MaxLocal, a.MaxEpochs}
		if got != [5]int{w.init, w.max, w.minL, w.maxL, w.epochs} {
			t.Errorf("%s: (init, max, min local, max local, epochs) = %v, want %v", name, got, [5]int{w.init, w.max, w.minL, w.maxL, w.epochs})
		}
		if math.Abs(a.ProgressToFinish()-w.finish) > 1e-6 {
			t.Errorf("%s: progress to finish %.9f, want %.9f", name, a.ProgressToFinish(), w.finish)
		}
	}
}

// apps_table.go is exactly what the generator makes of the shared traces.
func TestBuiltinTables_AreGeneratedFromSharedTraces(t *testing.T) {
	dir := filepath.Join(shareddata.Dir(t), "pollux", "traces")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("Pollux traces not found: %v", err)
	}
	out := filepath.Join(t.TempDir(), "apps_table.go")
	cmd := goRun(t, "./internal/gen", "-data", filepath.Dir(filepath.Dir(dir)), "-out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generator: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("apps_table.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, have) {
		t.Fatal("apps_table.go differs from the generator's output: run go generate ./sim/pollux")
	}
}

// A measured (placement, local_bsz) gives its row exactly; in between, the
// interpolation is linear; any rotation of a placement is the same one.
func TestThroughput_SmallPlacementsInterpolateAndRotate(t *testing.T) {
	a := mustApps(t)["bert"]
	step, sync, err := a.Throughput([]int{1}, 4)
	if err != nil || step != 0.45532354712486267 || sync != 0.013738612174987792 {
		t.Fatalf("bert (1, 4) = %v, %v, %v; want the measured row", step, sync, err)
	}
	s6, _, _ := a.Throughput([]int{1}, 6)
	s5, _, err := a.Throughput([]int{1}, 5)
	if err != nil || math.Abs(s5-(step+s6)/2) > 1e-12 {
		t.Fatalf("bert (1, 5) step %v, want the midpoint %v (%v)", s5, (step+s6)/2, err)
	}
	x, _, err1 := a.Throughput([]int{4, 1, 2}, 8)
	y, _, err2 := a.Throughput([]int{1, 2, 4}, 8)
	z, _, err3 := a.Throughput([]int{2, 0, 4, 1}, 8)
	if err1 != nil || err2 != nil || err3 != nil || x != y || y != z {
		t.Fatalf("rotations of 124 differ: %v %v %v (%v %v %v)", x, y, z, err1, err2, err3)
	}
	if _, _, err := a.Throughput([]int{1}, 13); err == nil {
		t.Fatal("a local batch size above the measured range must be an error")
	}
	if _, _, err := a.Throughput(nil, 4); err == nil {
		t.Fatal("an empty placement must be an error")
	}
}

// A wide placement on a measured (nodes, replicas) row gives that row.
func TestThroughput_WidePlacementsHitScalabilityRows(t *testing.T) {
	a := mustApps(t)["cifar10"]
	var row scalabilityRow
	for _, tr := range builtinTraces {
		if tr.Name == "cifar10" {
			row = tr.Scalability[len(tr.Scalability)/2]
		}
	}
	n, r := int(row.Nodes), int(row.Replicas)
	pl := make([]int, n)
	for i := range r {
		pl[i%n]++
	}
	step, sync, err := a.Throughput(pl, int(row.Local))
	if err != nil || math.Abs(step-row.Step) > 1e-12 || math.Abs(sync-row.Sync) > 1e-12 {
		t.Fatalf("cifar10 %d nodes %d replicas local %v: %v, %v, %v; want %v, %v", n, r, row.Local, step, sync, err, row.Step, row.Sync)
	}
	if _, _, err := a.Throughput([]int{1, 1, 1, 1, 1}, 32); err != nil {
		t.Fatalf("five single-GPU nodes: %v", err)
	}
}

// Gradient statistics and iterations interpolate linearly in the batch size
// between validated sizes (spec §2.1).
func TestGradStats_InterpolateBetweenValidatedBatchSizes(t *testing.T) {
	a := mustApps(t)["cifar10"]
	s1, v1 := a.GradStats(128, 3)
	s2, v2 := a.GradStats(256, 3)
	s, v := a.GradStats(192, 3)
	if math.Abs(s-(s1+s2)/2) > 1e-9 || math.Abs(v-(v1+v2)/2) > 1e-9 {
		t.Fatalf("grad stats at 192 = (%v, %v), want the midpoints (%v, %v)", s, v, (s1+s2)/2, (v1+v2)/2)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a batch size above max_bsz must panic")
		}
	}()
	a.GradStats(8192, 0)
}

// delaunay_table.go is exactly what internal/gen/delaunay.py makes of the
// shared traces with Qhull (scipy). The test needs a Python with numpy and
// scipy: $POLLUX_PYTHON, else python3 on the PATH, else the system's
// /usr/bin/python3 (Debian: python3-scipy); it skips without one.
func TestDelaunayTable_IsGeneratedFromSharedTraces(t *testing.T) {
	dir := filepath.Join(shareddata.Dir(t), "pollux", "traces")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("Pollux traces not found: %v", err)
	}
	py := ""
	for _, c := range []string{os.Getenv("POLLUX_PYTHON"), "python3", "/usr/bin/python3"} {
		if c != "" && exec.Command(c, "-c", "import numpy, scipy.spatial").Run() == nil {
			py = c
			break
		}
	}
	if py == "" {
		t.Skip("no Python with numpy and scipy: set $POLLUX_PYTHON")
	}
	out := filepath.Join(t.TempDir(), "delaunay_table.go")
	cmd := exec.Command(py, "internal/gen/delaunay.py", "-data", filepath.Dir(filepath.Dir(dir)), "-out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generator: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("delaunay_table.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, have) {
		t.Fatal("delaunay_table.go differs from the generator's output: run go generate ./sim/pollux")
	}
}

// A wide placement outside the convex hull of the measured points is an
// error (the artifact's interpolant is NaN there and asserted against),
// and one inside has a value.
func TestThroughput_WidePlacementsOutsideTheMeasurementsAreErrors(t *testing.T) {
	a := mustApps(t)["cifar10"]
	pl := make([]int, 16)
	for i := range pl {
		pl[i] = 4
	}
	if _, _, err := a.Throughput(pl, 1024); err == nil {
		t.Fatal("16×4 GPUs at local batch 1024, beyond the measured grid, must be an error")
	}
	if _, _, err := a.Throughput(pl, 32); err != nil {
		t.Fatalf("16×4 GPUs at local batch 32: %v", err)
	}
}
