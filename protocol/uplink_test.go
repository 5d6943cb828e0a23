package protocol_test

import (
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestUplink_FramesAreCheckedByOperation: each operation takes exactly
// the id and data it is documented with; anything else is refused with an
// error naming the field.
func TestUplink_FramesAreCheckedByOperation(t *testing.T) {
	for _, c := range []struct {
		line, field string // field: "" when valid
	}{
		{`{"v":1,"op":"register","id":1,"data":{"v":1}}`, ""},
		{`{"v":1,"op":"events","data":{"v":1}}`, ""},
		{`{"v":1,"op":"flush","id":9}`, ""},
		{`{"v":1,"op":"register","data":{"v":1}}`, `"id"`},
		{`{"v":1,"op":"flush"}`, `"id"`},
		{`{"v":1,"op":"events","id":2,"data":{"v":1}}`, `"id"`},
		{`{"v":1,"op":"flush","id":1,"data":{"v":1}}`, `"data"`},
		{`{"v":1,"op":"events"}`, `"data"`},
		{`{"v":1,"op":"events","data":[1]}`, `"data"`},
		{`{"v":1,"op":"events","data":"x"}`, `"data"`},
		{`{"v":1,"op":"lease","id":1}`, `"op"`},
		{`{"v":1,"op":"hello","id":1,"data":{"v":1,"token":"t"}}`, ""},
		{`{"v":1,"op":"hello","data":{"v":1}}`, `"id"`},
		{`{"v":1,"op":"hello","id":1}`, `"data"`},
		{`{"v":1,"op":"register","id":1,"data":{"v":1},"extra":1}`, "extra"},
		{`{"v":2,"op":"flush","id":1}`, "version"},
	} {
		_, err := protocol.DecodeUplinkRequest([]byte(c.line), 0)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.line, err)
		case c.field != "" && (err == nil || !strings.Contains(err.Error(), c.field)):
			t.Errorf("%s: error %v, want one naming %s", c.line, err, c.field)
		}
	}
	for _, c := range []struct {
		line, field string
	}{
		{`{"v":1,"op":"reply","id":1,"data":{"v":1}}`, ""},
		{`{"v":1,"op":"reply","id":1,"error":{"code":"unavailable","message":"m"}}`, ""},
		{`{"v":1,"op":"reconnected"}`, ""},
		{`{"v":1,"op":"reply"}`, `"id"`},
		{`{"v":1,"op":"reconnected","id":1}`, `"op"`},
		{`{"v":1,"op":"reply","id":1,"data":[]}`, `"data"`},
		{`{"v":1,"op":"events","id":1}`, `"op"`},
		{`{"v":1,"op":"lease","data":{"v":1}}`, ""},
		{`{"v":1,"op":"lease"}`, `"op"`},
		{`{"v":1,"op":"lease","id":3,"data":{"v":1}}`, `"op"`},
		{`{"v":1,"op":"lease","data":{"v":1},"error":{"code":"rejected","message":"m"}}`, `"op"`},
	} {
		_, err := protocol.DecodeUplinkAnswer([]byte(c.line), 0)
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.line, err)
		case c.field != "" && (err == nil || !strings.Contains(err.Error(), c.field)):
			t.Errorf("%s: error %v, want one naming %s", c.line, err, c.field)
		}
	}
	long := `{"v":1,"op":"events","data":{"pad":"` + strings.Repeat("x", protocol.MaxUplinkLine(100)) + `"}}`
	if _, err := protocol.DecodeUplinkRequest([]byte(long), 100); err == nil || protocol.Reason(err) != "too_large" {
		t.Errorf("a line over MaxUplinkLine: %v, want too_large", err)
	}
}

// TestUplink_HelloAndWelcomeAreStrict: the job socket's opening frames are
// decoded strictly and bounded.
func TestUplink_HelloAndWelcomeAreStrict(t *testing.T) {
	if h, err := protocol.DecodeUplinkHello([]byte(`{"v":1,"token":"abc"}`)); err != nil || h.Token != "abc" {
		t.Fatalf("hello: %+v, %v", h, err)
	}
	for _, c := range []struct{ data, want string }{
		{`{"v":1,"token":"` + strings.Repeat("x", protocol.MaxTokenLen+1) + `"}`, "token"},
		{`{"v":1,"tok":"a"}`, "tok"},
		{`{"v":2}`, "version"},
	} {
		if _, err := protocol.DecodeUplinkHello([]byte(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("hello %.40s: %v, want an error naming %s", c.data, err, c.want)
		}
	}
	if w, err := protocol.DecodeUplinkWelcome([]byte(`{"v":1,"node":"n-1"}`)); err != nil || w.Node != "n-1" {
		t.Fatalf("welcome: %+v, %v", w, err)
	}
	for _, c := range []struct{ data, want string }{
		{`{"v":1,"node":""}`, "node"},
		{`{"v":1,"node":"a.b"}`, "node"},
		{`{"v":1}`, "node"},
	} {
		if _, err := protocol.DecodeUplinkWelcome([]byte(c.data)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("welcome %s: %v, want an error naming %s", c.data, err, c.want)
		}
	}
}
