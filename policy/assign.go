package policy

import (
	"errors"
	"math"
	"sort"
)

// CostMatrix is a read-only matrix of assignment costs. A gonum mat.Matrix
// satisfies it; AlloX passes an implicit matrix so that its m″×(n·m″)
// costs are never materialized (spec §5.3).
type CostMatrix interface {
	Dims() (r, c int)
	At(i, j int) float64
}

// Errors of LinearSumAssignment.
var (
	ErrAssignmentInvalid    = errors.New("policy: assignment cost matrix contains NaN or -Inf")
	ErrAssignmentInfeasible = errors.New("policy: assignment cost matrix is infeasible")
)

// LinearSumAssignment solves the rectangular linear sum assignment problem:
// it assigns every row to a distinct column (or every column to a distinct
// row, when there are fewer columns) with the least total cost. It returns the
// assigned pairs (rows[k], cols[k]) with rows increasing. +Inf marks a
// forbidden pair.
//
// AlloX (spec §5.3) is sensitive to which of several optimal assignments is
// returned, because its cost matrix is full of exact ties, and the original
// used SciPy's linear_sum_assignment. This solver therefore follows the same
// method and the same tie rules as SciPy's implementation: the shortest
// augmenting path algorithm of Crouse (IEEE TAES 52(4), 2016, pp. 1685-1686),
// adding rows in index order to costs shifted by the matrix minimum; each
// Dijkstra-like search scans the unvisited columns starting from the last
// one, with a visited column replaced by the last unvisited one, and among
// equally short paths it keeps the last one seen that ends in a free column.
// A wide matrix is solved as it is; a tall one is solved transposed and the
// pairs are reported in row order. Ties are thus broken as SciPy (≥ 1.5)
// breaks them; for example a constant square matrix gives the identity.
func LinearSumAssignment(c CostMatrix) (rows, cols []int, err error) {
	nr, nc := c.Dims()
	if nr == 0 || nc == 0 {
		return []int{}, []int{}, nil
	}
	var src CostMatrix = c
	transposed := nc < nr
	if transposed {
		src = transposedCost{c}
		nr, nc = nc, nr
	}
	col4row, err := solveLSAP(src, nr, nc)
	if err != nil {
		return nil, nil, err
	}
	rows, cols = make([]int, nr), make([]int, nr)
	if !transposed {
		for i, j := range col4row {
			rows[i], cols[i] = i, j
		}
		return rows, cols, nil
	}
	order := make([]int, nr)
	for k := range order {
		order[k] = k
	}
	sort.Slice(order, func(a, b int) bool { return col4row[order[a]] < col4row[order[b]] })
	for k, t := range order {
		rows[k], cols[k] = col4row[t], t
	}
	return rows, cols, nil
}

type transposedCost struct{ m CostMatrix }

func (t transposedCost) Dims() (int, int)    { r, c := t.m.Dims(); return c, r }
func (t transposedCost) At(i, j int) float64 { return t.m.At(j, i) }

// rowFiller is implemented by implicit cost matrices that can write a whole
// row faster than column-by-column At calls.
type rowFiller interface {
	FillRow(i int, dst []float64)
}

// minimizer is implemented by implicit cost matrices that know their
// minimum entry exactly.
type minimizer interface {
	Min() float64
}

// lsap is the working state of one solve (nr ≤ nc).
type lsap struct {
	cost           CostMatrix
	row            []float64 // the costs of the row being scanned
	shift          float64   // the matrix minimum, subtracted from every cost
	nc             int
	u, v, spc      []float64 // row and column potentials, shortest path costs
	path           []int     // predecessor row of each column on the path
	col4row        []int
	row4col        []int
	sr, sc         []bool
	remaining      []int
	scannedColumns int // columns examined by full searches (tests)

	blocks *blockState // nil unless the columns come in identical blocks
}

// solveLSAP returns the column of every row; it requires nr ≤ nc.
func solveLSAP(c CostMatrix, nr, nc int) ([]int, error) {
	shift, err := costMin(c, nr, nc)
	if err != nil {
		return nil, err
	}
	s := &lsap{
		cost: c, row: make([]float64, nc), shift: shift, nc: nc,
		u: make([]float64, nr), v: make([]float64, nc), spc: make([]float64, nc),
		path: make([]int, nc), col4row: make([]int, nr), row4col: make([]int, nc),
		sr: make([]bool, nr), sc: make([]bool, nc), remaining: make([]int, nc),
	}
	for j := range s.path {
		s.path[j], s.row4col[j] = -1, -1
	}
	for i := range s.col4row {
		s.col4row[i] = -1
	}
	if b, ok := c.(blockedCost); ok && b.BlockSize() > 0 && nc%b.BlockSize() == 0 {
		s.blocks = newBlockState(b.BlockSize(), nc)
	}
	for cur := 0; cur < nr; cur++ {
		if s.blocks != nil && s.quickAugment(cur) {
			continue
		}
		sink, minVal, err := s.augmentingPath(cur)
		if err != nil {
			return nil, err
		}
		s.updateDuals(cur, minVal)
		s.augment(cur, sink)
	}
	return s.col4row, nil
}

// costMin is the smallest entry; SciPy subtracts it from every cost first,
// which can change floating-point ties, so it is kept here.
func costMin(c CostMatrix, nr, nc int) (float64, error) {
	shift := math.Inf(1)
	if m, ok := c.(minimizer); ok {
		shift = m.Min()
	} else {
		for i := 0; i < nr; i++ {
			for j := 0; j < nc; j++ {
				shift = min(shift, c.At(i, j))
			}
		}
	}
	if math.IsNaN(shift) || math.IsInf(shift, -1) {
		return 0, ErrAssignmentInvalid
	}
	if math.IsInf(shift, 1) {
		return 0, ErrAssignmentInfeasible
	}
	return shift, nil
}

// loadRow fills s.row with the shifted costs of row i.
func (s *lsap) loadRow(i int) error {
	if f, ok := s.cost.(rowFiller); ok {
		f.FillRow(i, s.row)
	} else {
		for j := range s.row {
			s.row[j] = s.cost.At(i, j)
		}
	}
	for j, c := range s.row {
		if math.IsNaN(c) || math.IsInf(c, -1) {
			return ErrAssignmentInvalid
		}
		s.row[j] = c - s.shift
	}
	return nil
}

// augmentingPath finds the shortest alternating path from free row i to a
// free column, Dijkstra-style over reduced costs; it returns the sink column
// (−1 if none is reachable) and the path length.
func (s *lsap) augmentingPath(i int) (sink int, minVal float64, err error) {
	num := s.nc
	for it := range s.remaining {
		s.remaining[it] = s.nc - it - 1
	}
	clear(s.sr)
	clear(s.sc)
	for j := range s.spc {
		s.spc[j] = math.Inf(1)
	}
	sink = -1
	var index int
	var lowest float64
	for sink == -1 {
		s.sr[i] = true
		if err := s.loadRow(i); err != nil {
			return -1, 0, err
		}
		index, lowest = s.scanRow(i, num, minVal)
		s.scannedColumns += num
		minVal = lowest
		if math.IsInf(minVal, 1) {
			return -1, minVal, ErrAssignmentInfeasible
		}
		j := s.remaining[index]
		if s.row4col[j] == -1 {
			sink = j
		} else {
			i = s.row4col[j]
		}
		s.sc[j] = true
		num--
		s.remaining[index] = s.remaining[num]
	}
	return sink, minVal, nil
}

// scanRow relaxes the reduced costs through row i over the first num
// remaining columns and returns the position in remaining of the closest
// column, preferring, among equally close ones, the last free one seen.
func (s *lsap) scanRow(i, num int, minVal float64) (index int, lowest float64) {
	index, lowest = -1, math.Inf(1)
	ui := s.u[i]
	row, v, spc, path, row4col := s.row, s.v, s.spc, s.path, s.row4col
	for it, j := range s.remaining[:num] {
		r := minVal + row[j] - ui - v[j]
		sp := spc[j]
		if r < sp {
			path[j] = i
			spc[j] = r
			sp = r
		}
		if sp < lowest || (sp == lowest && row4col[j] == -1) {
			lowest = sp
			index = it
		}
	}
	return index, lowest
}

func (s *lsap) updateDuals(cur int, minVal float64) {
	s.u[cur] += minVal
	for i, visited := range s.sr {
		if visited && i != cur {
			s.u[i] += minVal - s.spc[s.col4row[i]]
		}
	}
	for j, visited := range s.sc {
		if visited {
			s.v[j] -= minVal - s.spc[j]
		}
	}
}

// augment flips the assignment along the path ending at sink.
func (s *lsap) augment(cur, sink int) {
	if s.blocks != nil {
		s.blocks.take(sink)
	}
	j := sink
	for {
		i := s.path[j]
		s.row4col[j] = i
		s.col4row[i], j = j, s.col4row[i]
		if i == cur {
			return
		}
	}
}

// blockedCost is implemented by cost matrices whose columns come in blocks
// of BlockSize consecutive, identical columns (AlloX: one block per
// position, one column per GPU).
type blockedCost interface {
	BlockSize() int
}

// blockState tracks which columns of a blocked matrix are assigned.
// Assigned columns stay assigned, and only assigned columns ever have a
// non-zero potential v_j, so all free columns of a block share one reduced
// cost.
type blockState struct {
	size     int
	nextFree []int // lowest free column of each block (block end if none)
	assigned []int // assigned columns, in order of assignment
	taken    []bool
}

func newBlockState(size, nc int) *blockState {
	b := &blockState{size: size, nextFree: make([]int, nc/size), taken: make([]bool, nc)}
	for k := range b.nextFree {
		b.nextFree[k] = k * size
	}
	return b
}

func (b *blockState) take(j int) {
	if b.taken[j] {
		return
	}
	b.taken[j] = true
	b.assigned = append(b.assigned, j)
	k := j / b.size
	for end := (k + 1) * b.size; b.nextFree[k] < end && b.taken[b.nextFree[k]]; {
		b.nextFree[k]++
	}
}

// quickAugment handles the common search that ends at its first step: the
// closest column from row cur is a free one. It reproduces exactly what
// augmentingPath would do then, at a cost of O(blocks + assigned columns)
// instead of O(columns): the first scan keeps, among the closest columns,
// the free one of lowest index (scans run from the last column down). It
// reports false, changing nothing, when the search needs more steps.
func (s *lsap) quickAugment(cur int) bool {
	b := s.blocks
	ui := s.u[cur]
	best, sink := math.Inf(1), -1
	for k, j := range b.nextFree {
		if j == (k+1)*b.size {
			continue // no free column left in this block
		}
		r := s.cost.At(cur, j) - s.shift - ui
		if r < best {
			best, sink = r, j
		}
	}
	if sink < 0 || math.IsNaN(best) || math.IsInf(best, 0) {
		return false
	}
	for _, j := range b.assigned {
		r := s.cost.At(cur, j) - s.shift - ui - s.v[j]
		if !(r >= best) {
			return false // an assigned column is closer: a longer search
		}
	}
	// One-step search: u_cur += minVal; v_sink -= minVal − spc_sink = 0.
	s.u[cur] += best
	s.path[sink] = cur
	s.augment(cur, sink)
	return true
}
