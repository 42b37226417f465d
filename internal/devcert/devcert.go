// Package devcert makes a self-signed TLS server certificate for loopback
// addresses, for tests, the demo and the end-to-end test. Production
// control planes get their certificate from the operator.
package devcert

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
	"time"
)

// Files are a written certificate: CertFile and KeyFile for the server,
// Pool for clients that must trust it.
type Files struct {
	CertFile, KeyFile string
	CertPEM           []byte
	Pool              *x509.CertPool
}

// Write creates a certificate for localhost, 127.0.0.1, ::1 and the extra
// names (IP addresses or DNS names, for test hosts in network namespaces),
// valid from an hour before now for a week, and writes cert.pem and
// key.pem into dir.
func Write(dir string, now time.Time, extra ...string) (Files, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "nixfleet-cp (development)"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, n := range extra {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return Files{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	f := Files{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	if err := os.WriteFile(f.CertFile, f.CertPEM, 0o644); err != nil {
		return Files{}, err
	}
	if err := os.WriteFile(f.KeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return Files{}, err
	}
	f.Pool = x509.NewCertPool()
	f.Pool.AppendCertsFromPEM(f.CertPEM)
	return f, nil
}
