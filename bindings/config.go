package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"time"

	"github.com/shockwave-sched/shockwave/sdk"
)

// config is shockwave_open's JSON argument (shockwave.h documents it).
// Pointers tell an absent key from a zero value, so that the SDK's own
// defaults and validation apply to what the caller did not set.
type config struct {
	URL   *string `json:"url"`
	Creds *string `json:"creds"`
	Token *string `json:"token"`
	TLSCA *string `json:"tls_ca"`
	// TLSCert and TLSKey are the client certificate and its key; they go
	// together.
	TLSCert *string `json:"tls_cert"`
	TLSKey  *string `json:"tls_key"`
	Prefix  *string `json:"prefix"`

	Job        *string `json:"job"`
	Name       *string `json:"name"`
	Model      *string `json:"model"`
	Adaptation *string `json:"adaptation"`
	Workers    *int    `json:"workers"`

	BatchSize   *int   `json:"batch_size"`
	DatasetSize *int   `json:"dataset_size"`
	Epochs      *int   `json:"epochs"`
	Samples     *int64 `json:"samples"`
	TotalSteps  *int64 `json:"total_steps"`

	Schedule *struct {
		BatchSizes   []int     `json:"batch_sizes"`
		EpochSeconds []float64 `json:"epoch_seconds"`
	} `json:"schedule"`
	Priority        *float64        `json:"priority"`
	Throughput      *float64        `json:"throughput"`
	IsolatedSeconds *float64        `json:"isolated_seconds"`
	Resume          *sdk.Checkpoint `json:"resume"`

	ExitMode *bool `json:"exit_mode"`

	Rank            *int     `json:"rank"`
	WorldSize       *int     `json:"world_size"`
	LocalRank       *int     `json:"local_rank"`
	RankTimeout     *float64 `json:"rank_timeout"`      // seconds
	RankJoinTimeout *float64 `json:"rank_join_timeout"` // seconds
	Node            *string  `json:"node"`
	VisibleDevices  []int    `json:"visible_devices"`
	SampleInterval  *float64 `json:"sample_interval"`  // seconds
	RegisterTimeout *float64 `json:"register_timeout"` // seconds
	AgentSocket     *string  `json:"agent_socket"`     // the node agent's job socket
}

// parseConfig decodes and checks the JSON config and returns the SDK
// options with, for each, the config key it came from (to name the key
// when the SDK rejects the option), and the sample interval (0: default).
func parseConfig(raw []byte) (opts []sdk.Option, keys []string, sampleEvery time.Duration, err error) {
	var c config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err = dec.Decode(&c); err != nil {
		return nil, nil, 0, fmt.Errorf("config: %w", err)
	}
	if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
		return nil, nil, 0, errors.New("config: trailing data after the JSON object")
	}
	add := func(key string, o sdk.Option) {
		opts = append(opts, o)
		keys = append(keys, key)
	}
	str := func(key string, p *string, f func(string) sdk.Option) {
		if p != nil {
			add(key, f(*p))
		}
	}
	str("url", c.URL, sdk.WithURL)
	str("creds", c.Creds, sdk.WithCredentials)
	str("token", c.Token, sdk.WithToken)
	str("tls_ca", c.TLSCA, sdk.WithTLSCA)
	if c.TLSCert != nil || c.TLSKey != nil {
		add("tls_cert/tls_key", sdk.WithTLSClientCert(deref(c.TLSCert), deref(c.TLSKey)))
	}
	str("prefix", c.Prefix, sdk.WithPrefix)
	str("agent_socket", c.AgentSocket, sdk.WithAgentSocket)
	str("job", c.Job, sdk.WithJobID)
	str("name", c.Name, sdk.WithName)
	str("model", c.Model, sdk.WithModel)
	str("adaptation", c.Adaptation, sdk.WithAdaptation)
	ints := []struct {
		key string
		p   *int
		f   func(int) sdk.Option
	}{
		{"workers", c.Workers, sdk.WithWorkers},
		{"batch_size", c.BatchSize, sdk.WithBatchSize},
		{"dataset_size", c.DatasetSize, sdk.WithDatasetSize},
		{"epochs", c.Epochs, sdk.WithEpochs},
	}
	for _, i := range ints {
		if i.p != nil {
			add(i.key, i.f(*i.p))
		}
	}
	if c.Samples != nil {
		add("samples", sdk.WithSamples(*c.Samples))
	}
	if c.TotalSteps != nil {
		add("total_steps", sdk.WithTotalSteps(*c.TotalSteps))
	}
	if s := c.Schedule; s != nil {
		add("schedule", sdk.WithSchedule(s.BatchSizes, s.EpochSeconds))
	}
	floats := []struct {
		key string
		p   *float64
		f   func(float64) sdk.Option
	}{
		{"priority", c.Priority, sdk.WithPriority},
		{"throughput", c.Throughput, sdk.WithThroughput},
		{"isolated_seconds", c.IsolatedSeconds, sdk.WithIsolatedSeconds},
	}
	for _, f := range floats {
		if f.p != nil {
			add(f.key, f.f(*f.p))
		}
	}
	if c.Resume != nil {
		add("resume", sdk.WithResume(*c.Resume))
	}
	if c.ExitMode != nil && *c.ExitMode {
		add("exit_mode", sdk.ExitOnSuspend())
	}
	if err := rankConfig(&c, add); err != nil {
		return nil, nil, 0, err
	}
	for _, d := range []struct {
		key string
		p   *float64
		f   func(time.Duration) sdk.Option
	}{
		{"sample_interval", c.SampleInterval, sdk.WithSampleInterval},
		{"register_timeout", c.RegisterTimeout, sdk.WithRegisterTimeout},
	} {
		if d.p == nil {
			continue
		}
		if !(*d.p > 0 && *d.p <= 86400) || math.IsNaN(*d.p) {
			return nil, nil, 0, fmt.Errorf("config: %s: %g seconds out of range (0, 86400]", d.key, *d.p)
		}
		add(d.key, d.f(time.Duration(*d.p*float64(time.Second))))
	}
	if c.SampleInterval != nil {
		sampleEvery = time.Duration(*c.SampleInterval * float64(time.Second))
	}
	return opts, keys, sampleEvery, nil
}

// optionIndex finds the SDK's "sdk: option N: " prefix of a rejected
// option.
var optionIndex = regexp.MustCompile(`^sdk: option (\d+): `)

// nameOption rewrites an SDK error about its i-th option to name the
// config key instead ("config: batch_size: WithBatchSize: 0 out of range").
func nameOption(err error, keys []string) string {
	msg := err.Error()
	m := optionIndex.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	i, convErr := strconv.Atoi(msg[m[2]:m[3]])
	if convErr != nil || i < 1 || i > len(keys) {
		return msg
	}
	return "config: " + keys[i-1] + ": " + msg[m[1]:]
}

// rankConfig adds the options of a multi-process job and a resident node.
func rankConfig(c *config, add func(string, sdk.Option)) error {
	switch {
	case (c.Rank == nil) != (c.WorldSize == nil):
		return errors.New("config: rank and world_size go together")
	case c.Rank != nil:
		add("rank", sdk.WithRank(*c.Rank, *c.WorldSize))
	}
	if c.LocalRank != nil {
		add("local_rank", sdk.WithLocalRank(*c.LocalRank))
	}
	if c.RankTimeout != nil || c.RankJoinTimeout != nil {
		silent, join := sdk.DefaultRankTimeout, sdk.DefaultRankJoinTimeout
		for _, d := range []struct {
			key string
			p   *float64
			to  *time.Duration
		}{{"rank_timeout", c.RankTimeout, &silent}, {"rank_join_timeout", c.RankJoinTimeout, &join}} {
			if d.p == nil {
				continue
			}
			if !(*d.p > 0 && *d.p <= 86400) {
				return fmt.Errorf("config: %s: %g seconds out of range (0, 86400]", d.key, *d.p)
			}
			*d.to = time.Duration(*d.p * float64(time.Second))
		}
		add("rank_timeout", sdk.WithRankTimeout(silent, max(join, silent)))
	}
	if c.Node != nil {
		add("node", sdk.WithNode(*c.Node))
	}
	if c.VisibleDevices != nil {
		add("visible_devices", sdk.WithVisibleDevices(c.VisibleDevices...))
	}
	return nil
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
