package coordinator

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/internal/testpki"
)

func tlsEnv(t *testing.T, files func(dir string) *TLSFiles) *env {
	dir := t.TempDir()
	return newEnv(t, 1, func(ec *EmbeddedConfig, _ *ServiceConfig) {
		ec.DontListen, ec.Listen, ec.TLS = false, "127.0.0.1:-1", files(dir)
	})
}

func TestTLS_ClientsTrustingTheCAConnectAndAWrongCAIsRefused(t *testing.T) {
	certs := t.TempDir()
	ca, wrong := testpki.NewCA(t, certs, "ca"), testpki.NewCA(t, certs, "wrong-ca")
	e := tlsEnv(t, func(string) *TLSFiles {
		cert, key := ca.Issue(t, certs, "server")
		return &TLSFiles{Cert: cert, Key: key}
	})
	url := strings.Replace(e.emb.ClientURL(), "nats://", "tls://", 1)
	good, err := nats.Connect(url, ClientTLSOptions(ca.File, "", "")...)
	if err != nil {
		t.Fatalf("a client trusting the CA: %v", err)
	}
	defer good.Close()
	if rep := register(t, good, e.subj, newJob("tls", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	if nc, err := nats.Connect(url, ClientTLSOptions(wrong.File, "", "")...); err == nil {
		nc.Close()
		t.Fatal("a client trusting another CA connected")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("wrong CA refusal: %v", err)
	}
	if nc, err := nats.Connect(e.emb.ClientURL()); err == nil { // system roots only
		nc.Close()
		t.Fatal("a client without the CA connected")
	}
}

func TestTLS_WithAClientCAOnlyClientsWithItsCertificatesConnect(t *testing.T) {
	certs := t.TempDir()
	ca, wrong := testpki.NewCA(t, certs, "ca"), testpki.NewCA(t, certs, "wrong-ca")
	e := tlsEnv(t, func(string) *TLSFiles {
		cert, key := ca.Issue(t, certs, "server")
		return &TLSFiles{Cert: cert, Key: key, CA: ca.File}
	})
	url := e.emb.ClientURL()
	cert, key := ca.Issue(t, certs, "job")
	nc, err := nats.Connect(url, ClientTLSOptions(ca.File, cert, key)...)
	if err != nil {
		t.Fatalf("a client with a certificate of the CA: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(url, ClientTLSOptions(ca.File, "", "")...); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate connected")
	}
	badCert, badKey := wrong.Issue(t, certs, "intruder")
	if nc, err := nats.Connect(url, ClientTLSOptions(ca.File, badCert, badKey)...); err == nil {
		nc.Close()
		t.Fatal("a client with a certificate of another CA connected")
	}
}

func TestTLS_MissingFilesAreNamed(t *testing.T) {
	_, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: "127.0.0.1:-1",
		TLS: &TLSFiles{Cert: "/nonexistent/server.crt", Key: "/nonexistent/server.key"}})
	if err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Fatalf("missing certificate: %v", err)
	}
}
