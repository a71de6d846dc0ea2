package pki

import (
	"crypto/tls"
	"fmt"

	"k8s.io/client-go/util/cert"
)

// ClientTLS is the TLS configuration of a client that trusts the CAs in caPEM,
// presents the certificate certPEM with key keyPEM, and expects the server to
// be serverName (a DNS name or an IP address from its SANs). An empty
// serverName leaves it to the transport to verify each server against the
// address it dialed, which a client of several endpoints (clientv3) needs.
func ClientTLS(caPEM, certPEM, keyPEM []byte, serverName string) (*tls.Config, error) {
	pool, err := cert.NewPoolFromBytes(caPEM)
	if err != nil {
		return nil, fmt.Errorf("client TLS for %s: CA: %w", serverName, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client TLS for %s: client certificate: %w", serverName, err)
	}
	return &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{pair},
		ServerName:   serverName,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// ServerTLS is the TLS configuration of a server that presents certPEM with
// key keyPEM and admits only clients whose certificate the CAs in caPEM
// signed, as etcd's client and peer ports do.
func ServerTLS(caPEM, certPEM, keyPEM []byte) (*tls.Config, error) {
	pool, err := cert.NewPoolFromBytes(caPEM)
	if err != nil {
		return nil, fmt.Errorf("server TLS: client CA: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("server TLS: serving certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}, nil
}
