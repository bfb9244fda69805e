package redistest

import (
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
)

// tlsServerName is the name the server certificate is verified against.
// The certificate also covers 127.0.0.1, so a config without ServerName
// (go-redis then verifies the address' host) works too.
const tlsServerName = "localhost"

// StartTLSServer is StartServer for a redis-server that accepts TLS only:
// Addr is its TLS port and it listens on no plain port, so a test cannot
// pass through an unencrypted connection by mistake. The certificates come
// from a throwaway CA made for this server; the returned config trusts
// that CA alone and is what a go-redis client needs (Options.TLSConfig).
// Client sets it by itself. Clients need no certificate of their own
// ("--tls-auth-clients no"); extraArgs come after the TLS settings and
// override them. Every other Server method works as for StartServer.
func StartTLSServer(t testing.TB, extraArgs ...string) (*Server, *tls.Config) {
	t.Helper()
	// Not the server's dir: Restart empties that one.
	certDir := t.TempDir()
	conf, err := writeTestCerts(certDir)
	if err != nil {
		t.Fatalf("redistest: make TLS certificates: %v", err)
	}
	extra := []string{
		"--tls-cert-file", filepath.Join(certDir, "server.crt"),
		"--tls-key-file", filepath.Join(certDir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(certDir, "ca.crt"),
		"--tls-auth-clients", "no",
	}
	s := startServer(t, false, nil, append(extra, extraArgs...), conf)
	return s, conf.Clone()
}

// writeTestCerts writes ca.crt, server.crt and server.key into dir and
// returns a client config that trusts only that CA. ECDSA P-256 keeps
// generation to a millisecond or so, unlike RSA.
func writeTestCerts(dir string) (*tls.Config, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: tlsServerName},
		DNSNames:     []string{tlsServerName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}

	for name, block := range map[string]*pem.Block{
		"ca.crt":     {Type: "CERTIFICATE", Bytes: caDER},
		"server.crt": {Type: "CERTIFICATE", Bytes: der},
		"server.key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{RootCAs: pool, ServerName: tlsServerName, MinVersion: tls.VersionTLS12}, nil
}

func randSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}
