package pollux

//go:generate go run ./internal/gen -out apps_table.go
//go:generate python3 internal/gen/delaunay.py -out delaunay_table.go

// placementRow is one line of placements.csv: the placement id (decimal
// digits are replicas per node), the per-GPU batch size and the measured
// step and synchronisation times in seconds.
type placementRow struct {
	Placement, Local float64
	Step, Sync       float64
}

// scalabilityRow is one line of scalability.csv.
type scalabilityRow struct {
	Nodes, Replicas, Local float64
	Step, Sync             float64
}

// epochRow is one epoch of a validation run: cumulative progress and
// iterations at its end, and the gradient statistics during it.
type epochRow struct {
	Progress, Iteration float64
	GradSqr, GradVar    float64
}

// validationRun is one training run at a fixed global batch size.
type validationRun struct {
	Batch  int
	Epochs []epochRow
}

// appTrace is the measured data of one application.
type appTrace struct {
	Name        string
	Placements  []placementRow
	Scalability []scalabilityRow
	Validation  []validationRun
}
