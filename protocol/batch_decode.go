package protocol

import (
	"fmt"
	"reflect"
	"strconv"
)

// decodeBatch is DecodeBatch in one pass over data (see pass): the same
// messages are accepted, decode to the same values, and are refused with
// the same errors as by decodeStrict, whose passes (the version head with
// encoding/json, the key scan, the strict decode) it replaces. The oracle
// test keeps the old decoder and checks this on corpus and fuzzed inputs.
func decodeBatch(data []byte, limit int) (*Batch, error) {
	const kind = "batch"
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	if len(data) > limit {
		return nil, decodeErr(kind, ErrTooLarge, "%d bytes exceed the limit of %d", len(data), limit)
	}
	p := pass{d: data}
	b := new(Batch)
	top, err := p.top(b)
	if err != nil {
		return nil, decodeErr(kind, ErrMalformed, "%s", err)
	}
	if err := p.rank(kind, top); err != nil {
		return nil, err
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// top reads the whole message and returns the first byte of its value.
func (p *pass) top(b *Batch) (byte, error) {
	p.ws()
	if p.i >= len(p.d) {
		return 0, errEnd
	}
	c := p.d[p.i]
	var err error
	if c == '{' {
		err = p.batch(b)
	} else {
		err = p.skip(nil)
	}
	if err != nil {
		return 0, err
	}
	if p.ws(); p.i < len(p.d) {
		return 0, syntaxErr(p.d[p.i], "after top-level value")
	}
	return c, nil
}

// rank returns the error of a syntactically valid message, in the order
// of the old passes: not an object, then the schema version, then keys,
// then types.
func (p *pass) rank(kind string, top byte) error {
	switch {
	case top == 'n':
		return decodeErr(kind, ErrVersion, "missing schema version \"v\" (this build speaks %d)", Version)
	case top != '{':
		return decodeErr(kind, ErrMalformed, "expected a JSON object, got %s", kindOf(top))
	case p.v == nil:
		return decodeErr(kind, ErrVersion, "missing schema version \"v\" (this build speaks %d)", Version)
	}
	if ver, err := strconv.Atoi(string(p.v)); err != nil || ver != Version {
		return decodeErr(kind, ErrVersion, "unsupported schema version %.20s (this build speaks %d)", p.v, Version)
	}
	if p.keyErr != nil {
		return decodeErr(kind, ErrMalformed, "%s", p.keyErr)
	}
	if t := p.typeErr; t != nil {
		return decodeErr(kind, ErrMalformed, "field %q: %s is not a %s", t.field, t.value, t.typ)
	}
	return nil
}

var (
	eventsKey     = []byte("events")
	eventsPath    = [][]byte{eventsKey, arrayKey} // the labels inside an event
	batchType     = reflect.TypeFor[Batch]()
	eventType     = reflect.TypeFor[Event]()
	eventTypeName = eventType.String()
	eventsName    = reflect.TypeFor[[]Event]().String()
	eventKindName = reflect.TypeFor[EventType]().String()
)

// unknownKey refuses a key that is no field of t, with a hint when it
// differs from one only in case.
func (p *pass) unknownKey(t reflect.Type, key []byte) {
	if p.keyErr != nil {
		return // only the first is reported
	}
	if hint := jsonFields(t).caseMatch(string(key)); hint != "" {
		p.refuseKey(fmt.Sprintf("unknown field %%q (field names are case-sensitive: did you mean %q?)", hint), key)
		return
	}
	p.refuseKey("unknown field %q", key)
}

// batch reads the top-level object into b.
func (p *pass) batch(b *Batch) error {
	if err := p.open(); err != nil {
		return err
	}
	if p.empty('}') {
		return nil
	}
	var seen uint8
	for more := true; more; {
		key, err := p.key()
		if err != nil {
			return err
		}
		f := -1
		switch string(key) {
		case "v":
			f = 0
		case "job":
			f = 1
		case "events":
			f = 2
		}
		switch {
		case f < 0:
			p.unknownKey(batchType, key)
		case seen&(1<<f) != 0:
			p.refuseKey("duplicate field %q", key)
		default:
			seen |= 1 << f
		}
		start := p.i
		switch f {
		case 0:
			err = p.intField(&b.V, "", key)
		case 1:
			err = p.stringField(&b.Job, "", key, "string")
		case 2:
			err = p.events(b)
		default:
			err = p.skip(key)
		}
		if err != nil {
			return err
		}
		if len(key) == 1 && (key[0] == 'v' || key[0] == 'V') {
			p.v = p.d[start:p.i]
			if p.d[start] == 'n' {
				p.v = nil
			}
		}
		if more, err = p.more(); err != nil {
			return err
		}
	}
	return nil
}

// events reads the value of "events".
func (p *pass) events(b *Batch) error {
	switch c := p.d[p.i]; c {
	case '[':
	case 'n':
		b.Events = nil
		return p.literal()
	default:
		p.refuseType("", "events", kindOf(c), eventsName)
		return p.skip(eventsKey)
	}
	if err := p.open(); err != nil {
		return err
	}
	if b.Events == nil {
		b.Events = []Event{}
	}
	b.Events = b.Events[:0]
	if p.empty(']') {
		return nil
	}
	p.labels = eventsPath[:1:1] // appends of skip copy it
	for more := true; more; {
		if p.i >= len(p.d) {
			return errEnd
		}
		if len(b.Events) == cap(b.Events) {
			// Doubling, where append grows large slices by 1.25×: a
			// hostile batch of 87,000 "{}" then allocates 2×, not 5×, its
			// events' 9 MB.
			grown := make([]Event, len(b.Events), max(2, 2*cap(b.Events)))
			copy(grown, b.Events)
			b.Events = grown
		}
		b.Events = append(b.Events, Event{})
		var err error
		switch c := p.d[p.i]; c {
		case '{':
			p.labels = eventsPath[:2:2]
			err = p.event(&b.Events[len(b.Events)-1], b.Job)
			p.labels = eventsPath[:1:1]
		case 'n':
			err = p.literal()
		default:
			if !isValueStart(c) {
				return p.fail("looking for beginning of value")
			}
			p.refuseType("", "events", kindOf(c), eventTypeName)
			err = p.skip(arrayKey)
		}
		if err != nil {
			return err
		}
		if more, err = p.moreElems(); err != nil {
			return err
		}
	}
	p.labels = nil
	return nil
}

// isValueStart reports whether c can start a JSON value.
func isValueStart(c byte) bool {
	switch c {
	case '{', '[', '"', 't', 'f', 'n', '-':
		return true
	}
	return isDigit(c)
}

// Event fields, by their bit in the event's set of keys seen.
const (
	evV = iota
	evType
	evJob
	evSeq
	evSteps
	evElapsed
	evStepsDone
	evTotalSteps
	evEpoch
	evBatchSize
	evThroughput
)

func eventField(key []byte) int {
	switch string(key) {
	case "v":
		return evV
	case "type":
		return evType
	case "job":
		return evJob
	case "seq":
		return evSeq
	case "steps":
		return evSteps
	case "elapsed":
		return evElapsed
	case "steps_done":
		return evStepsDone
	case "total_steps":
		return evTotalSteps
	case "epoch":
		return evEpoch
	case "batch_size":
		return evBatchSize
	case "throughput":
		return evThroughput
	}
	return -1
}

// event reads one event object; job is the batch's job id so far, whose
// string an event with the same id shares.
func (p *pass) event(e *Event, job string) error {
	if err := p.open(); err != nil {
		return err
	}
	if p.empty('}') {
		return nil
	}
	var seen uint16
	for more := true; more; {
		key, err := p.key()
		if err != nil {
			return err
		}
		f := eventField(key)
		switch {
		case f < 0:
			p.unknownKey(eventType, key)
		case seen&(1<<f) != 0:
			p.refuseKey("duplicate field %q", key)
		default:
			seen |= 1 << f
		}
		if err = p.eventValue(e, f, key, job); err != nil {
			return err
		}
		if more, err = p.more(); err != nil {
			return err
		}
	}
	return nil
}

func (p *pass) eventValue(e *Event, f int, key []byte, job string) error {
	const in = "events"
	switch f {
	case evV:
		return p.intField(&e.V, in, key)
	case evType:
		return p.stringField((*string)(&e.Type), in, key, eventKindName,
			string(EventProgress), string(EventBatchSize), string(EventDone))
	case evJob:
		return p.stringField(&e.Job, in, key, "string", job)
	case evSeq:
		return p.uint64Field(&e.Seq, in, key)
	case evSteps:
		return p.int64Field(&e.Steps, in, key)
	case evElapsed:
		return p.floatField(&e.Elapsed, in, key)
	case evStepsDone:
		return p.int64Field(&e.StepsDone, in, key)
	case evTotalSteps:
		return p.int64Field(&e.TotalSteps, in, key)
	case evEpoch:
		return p.intField(&e.Epoch, in, key)
	case evBatchSize:
		return p.intField(&e.BatchSize, in, key)
	case evThroughput:
		return p.floatField(&e.Throughput, in, key)
	}
	return p.skip(key)
}
