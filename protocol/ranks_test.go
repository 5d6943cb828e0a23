package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestDecodeRankMessage_RejectsWhatNoRankMaySend(t *testing.T) {
	lease := `{"v":1,"job":"A","round":3,"action":"RUN","workers":[0,1],"start":1,"expiry":2}`
	cases := []struct{ name, msg, want string }{
		{"world of one", `{"v":1,"job":"A","rank":0,"world":1,"proc":1,"session":1,"gen":0,"step":0,"stop_at":-1}`, "world"},
		{"rank past world", `{"v":1,"job":"A","rank":2,"world":2,"proc":1,"session":0,"gen":0,"step":0,"stop_at":-1}`, "rank"},
		{"no process id", `{"v":1,"job":"A","rank":1,"world":2,"proc":0,"session":0,"gen":0,"step":0,"stop_at":-1}`, "proc"},
		{"negative step", `{"v":1,"job":"A","rank":1,"world":2,"proc":1,"session":0,"gen":0,"step":-1,"stop_at":-1}`, "step"},
		{"rank 1 releases", `{"v":1,"job":"A","rank":1,"world":2,"proc":1,"session":0,"gen":0,"step":0,"release":9,"stop_at":-1}`, "only rank 0"},
		{"rank 0 without session", `{"v":1,"job":"A","rank":0,"world":2,"proc":1,"session":0,"gen":1,"step":0,"stop_at":-1}`, "session"},
		{"release below base", `{"v":1,"job":"A","rank":0,"world":2,"proc":1,"session":1,"gen":1,"step":0,"base":5,"release":4,"stop_at":-1}`, "release"},
		{"stop past release", `{"v":1,"job":"A","rank":0,"world":2,"proc":1,"session":1,"gen":1,"step":0,"base":0,"release":4,"stop_at":5,"stop":"suspend"}`, "stop_at"},
		{"stop without reason", `{"v":1,"job":"A","rank":0,"world":2,"proc":1,"session":1,"gen":1,"step":0,"base":0,"release":4,"stop_at":3}`, "stop"},
		{"unknown stop", `{"v":1,"job":"A","rank":0,"world":2,"proc":1,"session":1,"gen":1,"step":0,"base":0,"release":4,"stop_at":3,"stop":"pause"}`, "unknown stop"},
		{"lease of another job", `{"v":1,"job":"B","rank":0,"world":2,"proc":1,"session":1,"gen":1,"step":0,"base":0,"release":4,"stop_at":-1,"lease":` + lease + `}`, "lease"},
		{"unknown field", `{"v":1,"job":"A","rank":1,"world":2,"proc":1,"session":0,"gen":0,"step":0,"stop_at":-1,"evil":1}`, "evil"},
	}
	for _, c := range cases {
		_, err := DecodeRankMessage([]byte(c.msg), 0)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an invalid-message error naming %q", c.name, err, c.want)
		}
	}
	ok := `{"v":1,"job":"A","rank":0,"world":2,"proc":1,"session":1,"gen":1,"step":0,"base":0,"release":4,"stop_at":4,"stop":"suspend","lease":` + lease + `}`
	if _, err := DecodeRankMessage([]byte(ok), 0); err != nil {
		t.Errorf("a valid stop announcement: %v", err)
	}
}
