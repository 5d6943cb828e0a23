package coordinator

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // PEM of cert
}

func newTestCA(t *testing.T, dir, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, file: filepath.Join(dir, name+".pem")}
	writePEM(t, ca.file, "CERTIFICATE", der)
	return ca
}

// issue signs a certificate for 127.0.0.1 (server and client use) and
// returns its cert and key files.
func (ca *testCA) issue(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func tlsEnv(t *testing.T, files func(dir string) *TLSFiles) *env {
	dir := t.TempDir()
	return newEnv(t, 1, func(ec *EmbeddedConfig, _ *ServiceConfig) {
		ec.DontListen, ec.Listen, ec.TLS = false, "127.0.0.1:-1", files(dir)
	})
}

func TestTLS_ClientsTrustingTheCAConnectAndAWrongCAIsRefused(t *testing.T) {
	certs := t.TempDir()
	ca, wrong := newTestCA(t, certs, "ca"), newTestCA(t, certs, "wrong-ca")
	e := tlsEnv(t, func(string) *TLSFiles {
		cert, key := ca.issue(t, certs, "server")
		return &TLSFiles{Cert: cert, Key: key}
	})
	url := strings.Replace(e.emb.ClientURL(), "nats://", "tls://", 1)
	good, err := nats.Connect(url, ClientTLSOptions(ca.file, "", "")...)
	if err != nil {
		t.Fatalf("a client trusting the CA: %v", err)
	}
	defer good.Close()
	if rep := register(t, good, e.subj, newJob("tls", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	if nc, err := nats.Connect(url, ClientTLSOptions(wrong.file, "", "")...); err == nil {
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
	ca, wrong := newTestCA(t, certs, "ca"), newTestCA(t, certs, "wrong-ca")
	e := tlsEnv(t, func(string) *TLSFiles {
		cert, key := ca.issue(t, certs, "server")
		return &TLSFiles{Cert: cert, Key: key, CA: ca.file}
	})
	url := e.emb.ClientURL()
	cert, key := ca.issue(t, certs, "job")
	nc, err := nats.Connect(url, ClientTLSOptions(ca.file, cert, key)...)
	if err != nil {
		t.Fatalf("a client with a certificate of the CA: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(url, ClientTLSOptions(ca.file, "", "")...); err == nil {
		nc.Close()
		t.Fatal("a client without a certificate connected")
	}
	badCert, badKey := wrong.issue(t, certs, "intruder")
	if nc, err := nats.Connect(url, ClientTLSOptions(ca.file, badCert, badKey)...); err == nil {
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
