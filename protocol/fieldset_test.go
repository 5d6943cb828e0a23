package protocol

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The hand-written batch decoder and lease encoder know their types' fields
// by name; a field added to one of these types must be added to them too.
// These tests fail until it is (the differential tests would only notice
// inputs that carry the new field).

func jsonNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

func TestDecodeBatch_KnowsEveryFieldOfBatchAndEvent(t *testing.T) {
	if got, want := jsonNames(batchType), []string{"v", "job", "events"}; !slices.Equal(got, want) {
		t.Errorf("Batch has fields %v; decodeBatch (batch_decode.go) reads %v: teach it the change", got, want)
	}
	var known []string
	for _, n := range jsonNames(eventType) {
		if eventField([]byte(n)) < 0 {
			t.Errorf("Event field %q is unknown to eventField (batch_decode.go)", n)
		}
		known = append(known, n)
	}
	if len(known) != evThroughput+1 {
		t.Errorf("Event has %d fields, eventField knows %d", len(known), evThroughput+1)
	}
}

func jsonTags(t reflect.Type) []string {
	var tags []string
	for i := range t.NumField() {
		tags = append(tags, t.Field(i).Tag.Get("json"))
	}
	return tags
}

func TestMarshalLease_KnowsEveryFieldOfLease(t *testing.T) {
	want := []string{"v", "job", "round", "action", "workers,omitempty", "devices,omitempty", "epoch,omitempty",
		"extension,omitempty", "start", "expiry", "reason,omitempty"}
	if got := jsonTags(reflect.TypeFor[Lease]()); !slices.Equal(got, want) {
		t.Errorf("Lease has fields %v; AppendLease (lease_encode.go) writes %v: teach it the change", got, want)
	}
	if got := jsonTags(reflect.TypeFor[NodeDevices]()); !slices.Equal(got, []string{"node", "devices"}) {
		t.Errorf("NodeDevices has fields %v; AppendLease writes node and devices", got)
	}
}
