package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
)

// DefaultMaxMessageBytes is the default size limit of one message; the
// coordinator's limit is configurable.
const DefaultMaxMessageBytes = 256 << 10

// Decoding errors. A DecodeError wraps ErrInvalid and exactly one of these,
// so callers can count rejections by reason (see Reason); a message that
// decodes but fails validation returns the *FieldError of Validate.
var (
	ErrTooLarge  = errors.New("protocol: message too large")
	ErrMalformed = errors.New("protocol: malformed JSON")
	ErrVersion   = errors.New("protocol: unsupported schema version")
)

// DecodeError is a message that could not be decoded.
type DecodeError struct {
	Msg    string // message kind, e.g. "register"
	Kind   error  // ErrTooLarge, ErrMalformed or ErrVersion
	Detail string
}

func (e *DecodeError) Error() string { return fmt.Sprintf("protocol: %s: %s", e.Msg, e.Detail) }

// Is makes errors.Is(err, ErrInvalid) and errors.Is(err, e.Kind) true.
func (e *DecodeError) Is(target error) bool { return target == ErrInvalid || target == e.Kind }

func decodeErr(msg string, kind error, format string, args ...any) error {
	return &DecodeError{Msg: msg, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Reason names the class of a decoding or validation error for metrics:
// "too_large", "malformed", "version" or "invalid"; "" for nil.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrVersion):
		return "version"
	default:
		return "invalid"
	}
}

// Code maps a decoding or validation error to the code of its error reply.
func Code(err error) ErrorCode {
	switch Reason(err) {
	case "too_large":
		return CodeTooLarge
	case "version":
		return CodeVersion
	default:
		return CodeBadRequest
	}
}

type validator interface{ Validate() error }

// decodeStrict decodes data into v, which must be a pointer to a message:
// the size is checked against limit (0: DefaultMaxMessageBytes), the schema
// version is read first (so a newer message gets a version error rather than
// an unknown-field error), then the message is decoded strictly — unknown
// fields, values of the wrong type and trailing data are rejected — and
// validated.
func decodeStrict(kind string, data []byte, limit int, v validator) error {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	if len(data) > limit {
		return decodeErr(kind, ErrTooLarge, "%d bytes exceed the limit of %d", len(data), limit)
	}
	var head struct {
		V *json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return decodeErr(kind, ErrMalformed, "%s", describe(err))
	}
	if head.V == nil {
		return decodeErr(kind, ErrVersion, "missing schema version \"v\" (this build speaks %d)", Version)
	}
	if ver, err := strconv.Atoi(string(*head.V)); err != nil || ver != Version {
		return decodeErr(kind, ErrVersion, "unsupported schema version %.20s (this build speaks %d)", *head.V, Version)
	}
	if err := DecodeStrictJSON(data, v); err != nil {
		return decodeErr(kind, ErrMalformed, "%s", describe(err))
	}
	return v.Validate()
}

// DecodeStrictJSON decodes the JSON object data into v (a pointer to a
// struct) more strictly than encoding/json: field names must match the json
// tags exactly (encoding/json matches them case-insensitively), a key may
// appear only once per object, unknown fields, values of the wrong type and
// trailing data are rejected.
func DecodeStrictJSON(data []byte, v any) error {
	if err := checkKeys(data, reflect.TypeOf(v)); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// describe turns a JSON error into a message that names the field.
func describe(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field == "" {
		return fmt.Sprintf("expected a JSON object, got %s", te.Value)
	}
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q: %s is not a %s", te.Field, te.Value, te.Type)
	}
	return err.Error()
}

// DecodeRegister decodes and validates a registration.
func DecodeRegister(data []byte, limit int) (*Register, error) {
	var r Register
	if err := decodeStrict("register", data, limit, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeBatch decodes and validates an event batch. It is the
// coordinator's hottest decoder, so it reads data once (decodeBatch)
// rather than in decodeStrict's passes, with the same strictness, values
// and errors.
func DecodeBatch(data []byte, limit int) (*Batch, error) {
	return decodeBatch(data, limit)
}

// DecodeLease decodes and validates a lease.
func DecodeLease(data []byte, limit int) (*Lease, error) {
	var l Lease
	if err := decodeStrict("lease", data, limit, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// DecodeRegisterReply decodes and validates a registration reply.
func DecodeRegisterReply(data []byte, limit int) (*RegisterReply, error) {
	var r RegisterReply
	if err := decodeStrict("register reply", data, limit, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeStatusRequest decodes and validates a status request; an empty or
// all-blank body is the zero request.
func DecodeStatusRequest(data []byte, limit int) (*StatusRequest, error) {
	if len(data) <= DefaultMaxMessageBytes && len(bytes.TrimSpace(data)) == 0 {
		return &StatusRequest{V: Version}, nil
	}
	var r StatusRequest
	if err := decodeStrict("status request", data, limit, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeStatusReply decodes and validates a status reply. Status replies of
// large clusters are big; pass a limit to match.
func DecodeStatusReply(data []byte, limit int) (*StatusReply, error) {
	var r StatusReply
	if err := decodeStrict("status reply", data, limit, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ErrorOf converts a decoding or validation error into an error reply body.
func ErrorOf(code ErrorCode, err error) *Error {
	return &Error{Code: code, Message: err.Error()}
}
