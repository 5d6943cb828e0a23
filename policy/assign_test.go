package policy

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// optDense is a row-major dense cost matrix for tests.
type optDense struct {
	r, c int
	v    []float64
}

func (d *optDense) Dims() (int, int)    { return d.r, d.c }
func (d *optDense) At(i, j int) float64 { return d.v[i*d.c+j] }

func optMatrix(rows [][]float64) *optDense {
	d := &optDense{r: len(rows), c: len(rows[0])}
	for _, row := range rows {
		d.v = append(d.v, row...)
	}
	return d
}

// bruteForceAssignment is the least total cost over all assignments of the
// smaller side into the larger, by enumeration.
func bruteForceAssignment(c CostMatrix) float64 {
	nr, nc := c.Dims()
	at := c.At
	if nr > nc {
		nr, nc = nc, nr
		at = func(i, j int) float64 { return c.At(j, i) }
	}
	used := make([]bool, nc)
	best := math.Inf(1)
	var rec func(i int, sum float64)
	rec = func(i int, sum float64) {
		if i == nr {
			best = min(best, sum)
			return
		}
		for j := 0; j < nc; j++ {
			if !used[j] {
				used[j] = true
				rec(i+1, sum+at(i, j))
				used[j] = false
			}
		}
	}
	rec(0, 0)
	return best
}

func checkAssignment(t *testing.T, c CostMatrix, rows, cols []int) float64 {
	t.Helper()
	nr, nc := c.Dims()
	if len(rows) != min(nr, nc) || len(cols) != len(rows) {
		t.Fatalf("%d pairs for a %d×%d matrix", len(rows), nr, nc)
	}
	if !slices.IsSorted(rows) {
		t.Fatalf("rows not increasing: %v", rows)
	}
	seenR, seenC := map[int]bool{}, map[int]bool{}
	total := 0.0
	for k := range rows {
		if seenR[rows[k]] || seenC[cols[k]] {
			t.Fatalf("row or column used twice: %v %v", rows, cols)
		}
		seenR[rows[k]], seenC[cols[k]] = true, true
		total += c.At(rows[k], cols[k])
	}
	return total
}

func TestLinearSumAssignment_MatchesBruteForceOnRandomRectangularMatrices(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 3000; trial++ {
		nr, nc := 1+rng.IntN(6), 1+rng.IntN(6)
		d := &optDense{r: nr, c: nc, v: make([]float64, nr*nc)}
		ties := trial%2 == 0
		for k := range d.v {
			if ties {
				d.v[k] = float64(rng.IntN(4)) // many exact ties
			} else {
				d.v[k] = rng.Float64()*100 - 50
			}
		}
		rows, cols, err := LinearSumAssignment(d)
		if err != nil {
			t.Fatal(err)
		}
		got := checkAssignment(t, d, rows, cols)
		if want := bruteForceAssignment(d); math.Abs(got-want) > 1e-9 {
			t.Fatalf("trial %d (%d×%d): cost %v, optimum %v\n%v", trial, nr, nc, got, want, d.v)
		}
	}
}

func TestLinearSumAssignment_ConstantSquareMatrixGivesIdentityAsSciPy(t *testing.T) {
	d := optMatrix([][]float64{{5, 5, 5}, {5, 5, 5}, {5, 5, 5}})
	_, cols, err := LinearSumAssignment(d)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cols, []int{0, 1, 2}) {
		t.Fatalf("cols %v, SciPy gives the identity", cols)
	}
}

func TestLinearSumAssignment_WideTiesTakeLowestFreeColumnsInRowOrder(t *testing.T) {
	// Every column costs the same: SciPy gives row i column i.
	d := optMatrix([][]float64{{1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}})
	_, cols, _ := LinearSumAssignment(d)
	if !slices.Equal(cols, []int{0, 1}) {
		t.Fatalf("cols %v, want [0 1]", cols)
	}
}

func TestLinearSumAssignment_SciPyDocumentationExample(t *testing.T) {
	d := optMatrix([][]float64{{4, 1, 3}, {2, 0, 5}, {3, 2, 2}})
	rows, cols, err := LinearSumAssignment(d)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rows, []int{0, 1, 2}) || !slices.Equal(cols, []int{1, 0, 2}) {
		t.Fatalf("got %v %v, SciPy gives [0 1 2] [1 0 2]", rows, cols)
	}
}

func TestLinearSumAssignment_TallMatrixIsSolvedTransposedWithRowsInOrder(t *testing.T) {
	d := optMatrix([][]float64{{9, 1}, {1, 9}, {0, 0}})
	rows, cols, err := LinearSumAssignment(d)
	if err != nil {
		t.Fatal(err)
	}
	// Two optima cost 1; SciPy's search (traced by hand) keeps rows 1 and 2.
	if !slices.Equal(rows, []int{1, 2}) || !slices.Equal(cols, []int{0, 1}) {
		t.Fatalf("got %v %v, want [1 2] [0 1]", rows, cols)
	}
}

func TestLinearSumAssignment_ForbiddenPairsAndInvalidEntries(t *testing.T) {
	inf := math.Inf(1)
	d := optMatrix([][]float64{{inf, 1}, {2, inf}})
	_, cols, err := LinearSumAssignment(d)
	if err != nil || !slices.Equal(cols, []int{1, 0}) {
		t.Fatalf("got %v, %v; want [1 0]", cols, err)
	}
	d = optMatrix([][]float64{{inf, 1}, {inf, 2}})
	if _, _, err := LinearSumAssignment(d); !errors.Is(err, ErrAssignmentInfeasible) {
		t.Fatalf("infeasible matrix: err %v", err)
	}
	d = optMatrix([][]float64{{math.NaN(), 1}, {1, 2}})
	if _, _, err := LinearSumAssignment(d); !errors.Is(err, ErrAssignmentInvalid) {
		t.Fatalf("NaN entry: err %v", err)
	}
	rows, cols, err := LinearSumAssignment(&optDense{})
	if err != nil || len(rows) != 0 || len(cols) != 0 {
		t.Fatalf("empty matrix: %v %v %v", rows, cols, err)
	}
}

// optOpaque hides the fast paths of an implicit matrix.
type optOpaque struct{ m CostMatrix }

func (o optOpaque) Dims() (int, int)    { return o.m.Dims() }
func (o optOpaque) At(i, j int) float64 { return o.m.At(i, j) }

func TestLinearSumAssignment_AlloXImplicitMatrixSolvesLikeItsDenseCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 3000; trial++ {
		m, n := 1+rng.IntN(9), 1+rng.IntN(6)
		c := &alloxCost{gpus: n, p: make([]float64, m), age: make([]float64, m)}
		for i := range c.p {
			c.p[i] = float64(rng.IntN(3)*100) - 10 // ties and a negative
			c.age[i] = float64(rng.IntN(3) * 7)
			if trial%3 == 0 {
				c.p[i] = rng.Float64() * 1000
			}
		}
		r1, c1, err1 := LinearSumAssignment(c)
		r2, c2, err2 := LinearSumAssignment(optOpaque{c}) // the generic path
		if err1 != nil || err2 != nil || !slices.Equal(r1, r2) || !slices.Equal(c1, c2) {
			t.Fatalf("implicit %v %v %v, dense %v %v %v", r1, c1, err1, r2, c2, err2)
		}
		got := checkAssignment(t, c, r1, c1)
		if m <= 4 && m*n <= 8 {
			if want := bruteForceAssignment(c); math.Abs(got-want) > 1e-9 {
				t.Fatalf("cost %v, optimum %v", got, want)
			}
		}
	}
}

func BenchmarkLinearSumAssignment_AlloX256x65536(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	c := &alloxCost{gpus: 256, p: make([]float64, 256), age: make([]float64, 256)}
	for i := range c.p {
		c.p[i] = 100 + rng.Float64()*10000
		c.age[i] = rng.Float64() * 1000
	}
	for b.Loop() {
		if _, _, err := LinearSumAssignment(c); err != nil {
			b.Fatal(err)
		}
	}
}
