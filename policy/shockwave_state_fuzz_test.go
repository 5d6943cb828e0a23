package policy

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzShockwaveState_DamagedStateIsRefusedOrLoads: a damaged Shockwave
// state (either version) never panics the decoder; one it accepts encodes
// again and loads again to the same bytes.
func FuzzShockwaveState_DamagedStateIsRefusedOrLoads(f *testing.F) {
	for _, info := range []string{InfoProfile, InfoOnline} {
		if b, err := os.ReadFile(filepath.Join("testdata", "shockwave-state-v1-"+info+".bin")); err == nil {
			f.Add(info == InfoOnline, b)
		}
		cfg := DefaultShockwaveConfig()
		cfg.Info = info
		p, _ := NewShockwave(cfg)
		jobs := stateScenarioJobs()
		for r := range 6 { // the scenario's first rounds, without a testing.T
			var active []*Job
			for i, j := range jobs {
				if r == 0 && i < 6 || r == 3 && i >= 6 {
					p.Admit(j)
				}
				if i < 6 || r >= 3 {
					active = append(active, j)
				}
			}
			_, _ = p.Allocate(&Snapshot{Round: r, Now: float64(120 * r), GPUs: 8, RoundSeconds: 120, Jobs: active})
		}
		f.Add(info == InfoOnline, p.MarshalState())
	}
	f.Fuzz(func(t *testing.T, online bool, b []byte) {
		cfg := DefaultShockwaveConfig()
		if !online {
			cfg.Info = InfoProfile
		}
		p, _ := NewShockwave(cfg)
		if err := p.UnmarshalState(b); err != nil {
			return
		}
		again := p.MarshalState()
		q, _ := NewShockwave(cfg)
		if err := q.UnmarshalState(again); err != nil {
			t.Fatalf("a state this code wrote does not load: %v", err)
		}
		if string(q.MarshalState()) != string(again) {
			t.Fatal("a loaded state encodes to other bytes")
		}
	})
}

// TestShockwaveState_DamagedBytesAreRefusedOrLoad: states of both versions
// and modes, truncated anywhere or with bytes overwritten (2,000 seeded
// damages each), are refused with an error or load (and then encode and
// load again to the same bytes); none panics.
func TestShockwaveState_DamagedBytesAreRefusedOrLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 2))
	for _, info := range []string{InfoProfile, InfoOnline} {
		cfg := DefaultShockwaveConfig()
		cfg.Info = info
		p, _ := NewShockwave(cfg)
		stateScenarioRounds(t, p, stateScenarioJobs(), 0, 10)
		v1, err := os.ReadFile(filepath.Join("testdata", "shockwave-state-v1-"+info+".bin"))
		if err != nil {
			t.Fatal(err)
		}
		refused := 0
		for _, good := range [][]byte{v1, p.MarshalState()} {
			for k := range 2000 {
				b := slices.Clone(good)
				if k%4 == 0 {
					b = b[:rng.IntN(len(b))]
				} else {
					for range 1 + rng.IntN(3) {
						b[rng.IntN(len(b))] = byte(rng.IntN(256))
					}
				}
				r, _ := NewShockwave(cfg)
				if err := r.UnmarshalState(b); err != nil {
					refused++
					continue
				}
				again := r.MarshalState()
				q, _ := NewShockwave(cfg)
				if err := q.UnmarshalState(again); err != nil || string(q.MarshalState()) != string(again) {
					t.Fatalf("%s: a damaged state that loaded does not encode and load again (%v)", info, err)
				}
			}
		}
		if refused == 0 {
			t.Fatalf("%s: no damaged state was refused", info)
		}
	}
}
