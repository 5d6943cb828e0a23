package main

import (
	"os"
	"strings"

	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/coordinator"
)

// Flag checks the commands that start or reach the coordinator's server
// share (coordinator, nats, status).

// readToken returns the token in file when one is named, else token, else
// $SHOCKWAVE_TOKEN when env is set.
func readToken(token, file string, env bool) (string, error) {
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return "", badInput("--token-file: %v", err)
		}
		token = strings.TrimSpace(string(raw))
	}
	if token == "" && env {
		token = os.Getenv("SHOCKWAVE_TOKEN")
	}
	return token, nil
}

// checkServerFlags checks the flags of the embedded server that the
// coordinator and nats commands share: the flood limit, the TLS pair and
// the log format.
func checkServerFlags(floodLimit int, cert, key, logFormat string) error {
	switch {
	case floodLimit != 0 && floodLimit < 100:
		return badInput("--flood-limit: %d is below 100 messages a second (0 turns the guard off)", floodLimit)
	case (cert == "") != (key == ""):
		return badInput("--tls-cert and --tls-key go together")
	case logFormat != "json" && logFormat != "console":
		return badInput("--log-format: unknown format %q (want json or console)", logFormat)
	}
	return nil
}

// checkTLSFiles checks that the TLS files named exist.
func checkTLSFiles(cert, key, ca string) error {
	for _, fl := range [][2]string{{"--tls-cert", cert}, {"--tls-key", key}, {"--tls-ca", ca}} {
		if _, err := os.Stat(fl[1]); fl[1] != "" && err != nil {
			return badInput("%s: %v", fl[0], err)
		}
	}
	return nil
}

// embeddedConfig is the server of `shockwave coordinator` and `shockwave
// nats`: a flood limit of 0 turns the guard off.
func embeddedConfig(listen, dataDir string, mode coordinator.AuthMode, token, prefix string, floodLimit int, cert, key, ca string, log *zerolog.Logger) coordinator.EmbeddedConfig {
	cfg := coordinator.EmbeddedConfig{Listen: listen, DataDir: dataDir, Auth: mode, Token: token, Prefix: prefix, FloodLimit: floodLimit, Logger: log}
	if floodLimit == 0 {
		cfg.FloodLimit = -1
	}
	if cert != "" {
		cfg.TLS = &coordinator.TLSFiles{Cert: cert, Key: key, CA: ca}
	}
	return cfg
}
