package coordinator

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestCreds_TheRanksOfAJobTalkOnItsRanksSubjectAndNoOtherJobCanListenOrSpeak
// checks the ranks subject's permissions: two connections with job A's
// credentials (two ranks of A) exchange messages on A's ranks subject; job
// B's credentials may neither subscribe to it nor publish on it.
func TestCreds_TheRanksOfAJobTalkOnItsRanksSubjectAndNoOtherJobCanListenOrSpeak(t *testing.T) {
	e := credsEnv(t)
	a0, va0 := jobClient(t, e, "A")
	a1, _ := jobClient(t, e, "A")
	b, vb := jobClient(t, e, "B")
	got := make(chan *nats.Msg, 4)
	if _, err := a1.ChanSubscribe(e.subj.Ranks("A"), got); err != nil {
		t.Fatal(err)
	}
	stolen := make(chan *nats.Msg, 4)
	_, _ = b.ChanSubscribe(e.subj.Ranks("A"), stolen)
	_ = a1.Flush()
	_ = b.Flush()
	eventually(t, 5*time.Second, "B's subscription refused", func() bool {
		return vb.has("Permissions Violation for Subscription to \"shockwave.job.A.ranks\"")
	})
	if err := a0.Publish(e.subj.Ranks("A"), []byte("from rank 0")); err != nil {
		t.Fatal(err)
	}
	_ = a0.Flush()
	select {
	case m := <-got:
		if string(m.Data) != "from rank 0" {
			t.Errorf("rank 1 of A got %q", m.Data)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("rank 1 of A did not get rank 0's message on A's ranks subject")
	}
	_ = b.Publish(e.subj.Ranks("A"), []byte("forged"))
	_ = b.Flush()
	eventually(t, 5*time.Second, "B's publication refused", func() bool {
		return vb.has("Permissions Violation for Publish to \"shockwave.job.A.ranks\"")
	})
	select {
	case m := <-got:
		t.Errorf("A's ranks got a message from B: %q", m.Data)
	case m := <-stolen:
		t.Errorf("B read A's ranks subject: %q", m.Data)
	case <-time.After(200 * time.Millisecond):
	}
	if len(va0.errs) > 0 {
		t.Errorf("permission errors in A's own ranks traffic: %v", va0.errs)
	}
}
