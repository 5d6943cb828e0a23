package coordinator

// Health is the service's readiness, as /healthz reports it. A standby
// (another coordinator leads) and a leader whose last write to the log
// failed are not OK.
type Health struct {
	OK         bool   `json:"ok"`
	Replaying  bool   `json:"replaying"`
	Standby    bool   `json:"standby"`
	Connected  bool   `json:"connected"`
	LogFailing bool   `json:"log_write_failing"`
	Epoch      uint64 `json:"epoch"`
	LogSeq     uint64 `json:"log_seq"`
	Rounds     int64  `json:"rounds"`
	// Error says why the service refused to serve (a damaged log).
	Error string `json:"error,omitempty"`
	// Recovery says what a --recover-from-snapshot start lost.
	Recovery string `json:"recovery,omitempty"`
}

// Health reports whether the service leads, replayed its log, is connected
// and writes to its log.
func (s *Service) Health() Health {
	ready := s.ready.Load()
	h := Health{Replaying: !ready && !s.standby.Load(), Standby: !ready && s.standby.Load(), Connected: s.nc.IsConnected(),
		LogFailing: s.failing.Load(), LogSeq: s.seq.Load(), Rounds: s.rounds.Load(), Epoch: s.logEpoch.Load()}
	h.OK = ready && h.Connected && !h.LogFailing
	if p := s.refused.Load(); p != nil {
		h.Error, h.OK = *p, false
	}
	if p := s.recMsg.Load(); p != nil {
		h.Recovery = *p
	}
	return h
}
