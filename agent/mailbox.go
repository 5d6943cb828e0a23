package agent

import "sync"

// mailbox hands desired states from the NATS callback, the join and the
// heartbeats to the agent's loop. Putting never blocks: it keeps the one
// state that supersedes the others (each is the node's whole state, so an
// older one the loop has not taken yet is of no use once a newer one is
// there). A queue that blocked when full once deadlocked an agent: its
// loop, still joining, did not read, the callback filled the queue with
// the states the coordinator sent while nodes joined, and the join's
// answer then waited for a place forever, so the agent never sent a
// heartbeat and its node timed out.
type mailbox struct {
	mu    sync.Mutex
	held  *desiredAt
	ready chan struct{} // one token while a state is held
}

func newMailbox() *mailbox { return &mailbox{ready: make(chan struct{}, 1)} }

// put keeps d unless the held state supersedes it. A join's answer
// replaced by a newer state of the same log passes its mark on: the newer
// state starts the agent's view afresh as the answer would have.
func (m *mailbox) put(d desiredAt) {
	m.mu.Lock()
	if m.held != nil && !d.supersedes(m.held) {
		m.mu.Unlock()
		return
	}
	if m.held != nil && m.held.joined {
		d.joined = true
	}
	m.held = &d
	m.mu.Unlock()
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// take returns the held state, if any, and empties the box.
func (m *mailbox) take() (desiredAt, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil {
		return desiredAt{}, false
	}
	d := *m.held
	m.held = nil
	return d, true
}
