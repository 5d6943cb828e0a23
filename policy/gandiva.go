package policy

// GandivaFair is the Gandiva-Fair allocation of the original (spec §5.4):
// every job gets the time fraction min(1, G/m), whatever its gang width or
// throughput. The Gavel round mechanism turns it into rounds. With the
// original's round mechanism this reproduces the released 120-job, 32-GPU
// simulation bit for bit (spec §9).
type GandivaFair struct{}

// NewGandivaFair returns the Gandiva-Fair allocator.
func NewGandivaFair() Allocator { return GandivaFair{} }

// Name is "gandiva_fair".
func (GandivaFair) Name() string { return "gandiva_fair" }

// Allocate gives every job min(1, G/m).
func (GandivaFair) Allocate(s *Snapshot) ([]float64, error) {
	x := make([]float64, len(s.Jobs))
	share := min(1, float64(s.GPUs)/float64(len(s.Jobs)))
	for i := range x {
		x[i] = share
	}
	return x, nil
}

// Forget keeps no state.
func (GandivaFair) Forget(string) {}
