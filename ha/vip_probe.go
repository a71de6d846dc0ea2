package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"stratum.dev/stratum/internal/version"
)

// vipProbeWithin bounds a bring-up's probe of its VIP: a free address on
// the node network answers nothing, and the dial runs out or finds no host.
const vipProbeWithin = 2 * time.Second

// refuseVIPServedElsewhere refuses a VIP on which an apiserver of another
// cluster already answers TLS at the apiserver port: that cluster's control
// planes hold it (the first node's `stratum up --vip` run on a machine meant
// to join), and this node's VIP candidate would fight them for the address
// by gratuitous ARP, so that the real cluster's clients reach a foreign
// apiserver in turn and fail TLS. clusterCAPEM is nil at a bootstrap, where
// any TLS answer refuses; a control plane adopting the VIP of its cluster,
// which another control plane adopted first, passes, the answer's
// certificate chaining to clusterCAPEM. An address of this host's own (a
// re-run after it took the VIP), an address nothing answers on within
// vipProbeWithin, and one that answers without TLS pass.
func (n *Node) refuseVIPServedElsewhere(ctx context.Context, vip string, clusterCAPEM []byte) error {
	want, err := netip.ParseAddr(vip)
	if err != nil {
		return fmt.Errorf("the VIP %q is not an IP address", vip)
	}
	own, err := n.env.Host.Addresses()
	if err != nil {
		return fmt.Errorf("list this host's addresses: %w", err)
	}
	for _, a := range own {
		if a.Unmap() == want.Unmap() {
			return nil
		}
	}
	pctx, cancel := context.WithTimeout(ctx, vipProbeWithin)
	defer cancel()
	addr := net.JoinHostPort(vip, strconv.Itoa(version.APIServerPort))
	conn, err := n.env.Host.DialContext(pctx, "tcp", addr)
	if err != nil {
		return nil // nothing answers there
	}
	defer conn.Close()
	var roots *x509.CertPool
	if clusterCAPEM != nil {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(clusterCAPEM) {
			return errors.New("the cluster CA certificate holds no certificate")
		}
	}
	verified := false
	tc := tls.Client(conn, &tls.Config{
		InsecureSkipVerify: true, // the chain is judged below, not the name: which cluster answers is the question
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			verified = roots != nil && chainsTo(raw, roots)
			return nil
		},
	})
	if err := tc.HandshakeContext(pctx); err != nil {
		// No TLS answer within the bound: nothing serves there (a
		// connection accepted and closed, as a simulated VIP nobody holds
		// does), or not an apiserver; a restarting apiserver of this
		// cluster looks the same, so it is not judged.
		return nil
	}
	if verified {
		return nil // this cluster's own apiserver: another control plane adopted the VIP first
	}
	why := "a TLS server, which a VIP nobody holds is not"
	if roots != nil {
		why = "its certificate does not chain to this cluster's CA"
	}
	return fmt.Errorf("the VIP %s already answers on port %d with another cluster's apiserver (%s): that cluster's control planes hold the address, and this node's VIP would fight them for it, its clients reaching either apiserver in turn and failing TLS: pick an address nothing uses for --vip, or, to add this machine to that cluster, run the join command `stratum token create --control-plane` prints on one of its control planes", vip, version.APIServerPort, why)
}

// chainsTo reports whether the certificate chain raw (leaf first, as a TLS
// server sends it) verifies up to one of roots: signatures only, judged at
// the leaf's own start and for any usage, since which cluster answers is the
// question, not whether its certificate is current (a holder of this
// cluster whose serving certificate expired is still this cluster's).
func chainsTo(raw [][]byte, roots *x509.CertPool) bool {
	var certs []*x509.Certificate
	for _, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return false
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return false
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: certs[0].NotBefore, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}
