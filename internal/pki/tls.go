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

// Names of stratum's own etcd client credentials, relative to the PKI dir.
const (
	EtcdCAFile         = "etcd/ca.crt"
	EtcdClientCertFile = "etcd/healthcheck-client.crt"
	EtcdClientKeyFile  = "etcd/healthcheck-client.key"
)

// EtcdClientTLS is stratum's own etcd client TLS on a node: the etcd CA and
// the healthcheck-client leaf, read through read (a host's files, by name
// relative to the PKI dir). Every member is verified against the address it
// was dialed at.
func EtcdClientTLS(read func(name string) ([]byte, error)) (*tls.Config, error) {
	var pems [3][]byte
	for i, name := range []string{EtcdCAFile, EtcdClientCertFile, EtcdClientKeyFile} {
		b, err := read(name)
		if err != nil {
			return nil, fmt.Errorf("read this node's etcd client credentials (%s): %w", name, err)
		}
		pems[i] = b
	}
	return ClientTLS(pems[0], pems[1], pems[2], "")
}
