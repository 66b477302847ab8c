package rls_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tollgate/tollgate/internal/app"
	"github.com/tollgate/tollgate/internal/testkit/pgtest"
)

// selfSigned writes a certificate for 127.0.0.1 and its key as PEM files
// and returns their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tollgate test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// TestTLS: with a certificate and key the service speaks gRPC over TLS
// only: a client that trusts the certificate is answered, a plaintext one
// is not.
func TestTLS(t *testing.T) {
	certFile, keyFile, roots := selfSigned(t)
	in := start(t, pgtest.New(t), func(c *app.Config) { c.GRPCTLSCert, c.GRPCTLSKey = certFile, keyFile })
	acme := newTenant(t, in.app, "pro")
	putPolicy(t, in.app, acme.Tenant.ID, "p", 5, time.Minute)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("policy", "p", "u", "1")}}

	cc, err := grpc.NewClient(in.app.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(as(t.Context(), acme.Live), 10*time.Second)
	defer cancel()
	res, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req)
	if err != nil || res.OverallCode != ok {
		t.Fatalf("over TLS: %v %v, want OK", res, err)
	}
	// The harness's own client speaks plaintext: refused.
	short, cancel2 := context.WithTimeout(as(t.Context(), acme.Live), 3*time.Second)
	defer cancel2()
	if _, err := in.rls.ShouldRateLimit(short, req); err == nil {
		t.Error("a plaintext call to the TLS service was answered")
	}
}
