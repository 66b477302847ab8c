package mail_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testkit/solo"
)

// The certificate and key the TLS tests' mailpit serves, trusted by this
// test binary alone (SSL_CERT_FILE), and a second pair trusted by nobody.
var trusted, untrusted certPair

type certPair struct{ cert, key string }

// TestMain holds the machine's test lock (internal/testkit/solo) and makes
// the certificates first: SSL_CERT_FILE must be set before crypto/x509
// first reads the system's roots.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tollgate-mail-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if trusted, err = writeCert(dir, "trusted"); err == nil {
		untrusted, err = writeCert(dir, "untrusted")
	}
	if err == nil {
		err = os.Setenv("SSL_CERT_FILE", trusted.cert)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "make test certificates:", err)
		os.Exit(1)
	}
	code := solo.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// writeCert writes a self-signed certificate for localhost and every
// address of this machine, and its key, as PEM files in dir.
func writeCert(dir, name string) (certPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "tollgate mail test " + name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, DNSNames: []string{"localhost"},
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return certPair{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			tmpl.IPAddresses = append(tmpl.IPAddresses, n.IP)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return certPair{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return certPair{}, err
	}
	p := certPair{cert: filepath.Join(dir, name+".crt"), key: filepath.Join(dir, name+".key")}
	if err := os.WriteFile(p.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return certPair{}, err
	}
	return p, os.WriteFile(p.key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
}
