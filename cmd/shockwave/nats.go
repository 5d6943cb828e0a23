package main

import (
	"flag"
	"io"
	"path/filepath"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/protocol"
)

// `shockwave nats` runs the coordinator's NATS server alone, in a process
// of its own: JetStream, the jobs' account with its permissions, the
// flood guard, the coordinator's and the administrator's secrets (none and
// token mode) or the credentials authority and its revocations (creds
// mode) in the data directory, exactly as `shockwave coordinator` embeds
// it. A coordinator (and its standbys) then connect with --nats-url and
// the coordinator's secret, or --authority in creds mode. At 10,000 jobs each with a connection of its own,
// the server's connections are most of an embedded coordinator's memory
// and their collections most of its tail (docs/scale.md); apart, the
// coordinator keeps neither.

func init() {
	commands["nats"] = command{summary: "run the coordinator's NATS server alone, for coordinators on --nats-url", run: runNATS}
}

type natsFlags struct {
	listen, dataDir, auth, token, tokenFile, prefix string
	tlsCert, tlsKey, tlsCA, logFormat, logLevel     string
	floodLimit                                      int
}

func (f *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4222", "client address")
	fs.StringVar(&f.dataDir, "data-dir", "./shockwave-data", "JetStream storage and the secrets")
	fs.StringVar(&f.auth, "auth", "none", "authentication: none, token or creds (the authority in DATA/auth; coordinators connect with --authority DATA/auth)")
	fs.StringVar(&f.token, "token", "", "shared job token (--auth token; default $SHOCKWAVE_TOKEN)")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the shared job token from `FILE`")
	fs.StringVar(&f.prefix, "prefix", protocol.DefaultPrefix, "subject prefix (the coordinators' --prefix)")
	fs.IntVar(&f.floodLimit, "flood-limit", coordinator.DefaultFloodLimit, "disconnect a job connection that publishes more than this many messages (or KiB) a second and refuse its address new connections for a cooldown (0: off)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve client connections over TLS with this certificate `FILE` (PEM; needs --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "private key `FILE` of --tls-cert (PEM)")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "with --tls-cert, require client certificates this CA `FILE` signed (PEM)")
	fs.StringVar(&f.logFormat, "log-format", "json", "log format: json or console")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// config checks the flags and returns the server's configuration.
func (f *natsFlags) config() (coordinator.EmbeddedConfig, error) {
	mode, err := coordinator.ParseAuthMode(f.auth)
	if err != nil {
		return coordinator.EmbeddedConfig{}, usageError{err}
	}
	if err := checkServerFlags(f.floodLimit, f.tlsCert, f.tlsKey, f.logFormat); err != nil {
		return coordinator.EmbeddedConfig{}, err
	}
	if f.tlsCA != "" && f.tlsCert == "" {
		return coordinator.EmbeddedConfig{}, badInput("--tls-ca needs --tls-cert")
	}
	if err := protocol.ValidatePrefix(f.prefix); err != nil {
		return coordinator.EmbeddedConfig{}, usageError{err}
	}
	if err := checkTLSFiles(f.tlsCert, f.tlsKey, f.tlsCA); err != nil {
		return coordinator.EmbeddedConfig{}, err
	}
	if f.token, err = readToken(f.token, f.tokenFile, true); err != nil {
		return coordinator.EmbeddedConfig{}, err
	}
	if mode == coordinator.AuthToken && f.token == "" {
		return coordinator.EmbeddedConfig{}, badInput("--auth token needs --token, --token-file or $SHOCKWAVE_TOKEN")
	}
	cfg := embeddedConfig(f.listen, f.dataDir, mode, f.token, f.prefix, f.floodLimit, f.tlsCert, f.tlsKey, f.tlsCA, nil)
	cfg.ConnectionsAdvice = -1 // a server run apart is the advised deployment
	return cfg, nil
}

func runNATS(args []string, _, stderr io.Writer) error {
	var f natsFlags
	fs := newFlags("nats", stderr)
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := f.config()
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return err
	}
	if cfg.Auth == coordinator.AuthNone && !coordinator.IsLoopback(f.listen) {
		log.Warn().Str("listen", f.listen).Msg("no authentication on a non-loopback address: anyone who reaches it can register jobs and publish events; use --auth token")
	}
	cfg.Logger = &log
	ctx, stop := signalContext()
	defer stop()
	emb, err := coordinator.StartEmbedded(cfg)
	if err != nil {
		return err
	}
	defer emb.Shutdown()
	how := "--token-file " + emb.CoordinatorSecretFile(f.dataDir)
	if cfg.Auth == coordinator.AuthCreds {
		how = "--authority " + filepath.Join(f.dataDir, "auth")
	}
	log.Info().Str("url", emb.ClientURL()).Str("data_dir", f.dataDir).Str("auth", string(cfg.Auth)).Bool("tls", f.tlsCert != "").
		Str("admin_token_file", emb.AdminSecretFile(f.dataDir)).
		Msg("NATS server started: shockwave coordinator --nats-url " + emb.ClientURL() + " " + how)
	<-ctx.Done()
	log.Info().Msg("NATS server stopping")
	return nil
}
