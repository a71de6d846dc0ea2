package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"strings"
	"time"
)

// APISANs are the extra names and addresses the apiserver certificate must
// carry beyond the node's own: the VIP and the first service IP, and any
// names clients reach the cluster by.
type APISANs struct {
	DNSNames []string
	IPs      []net.IP
}

// Common names and organizations of the node's leaves.
const (
	APIServerCN              = "kube-apiserver"
	APIServerEtcdClientCN    = "kube-apiserver-etcd-client"
	APIServerKubeletClientCN = "kube-apiserver-kubelet-client"
	FrontProxyClientCN       = "front-proxy-client"
	EtcdClientCN             = "stratum-etcd-client"
	AdminCN                  = "kubernetes-admin"
	// ClusterAdminsGroup is the group of the admin credential and of the
	// apiserver's kubelet client: bound to the cluster-admin ClusterRole by
	// a ClusterRoleBinding of the same name (internal/clusteradmins), so
	// RBAC decides for them and a binding taken away revokes them, as
	// kubeadm's kubeadm:cluster-admins since 1.29.
	ClusterAdminsGroup = "stratum:cluster-admins"
	// MastersGroup is Kubernetes' superuser group, which the apiserver
	// authorizes before any authorizer and no binding can revoke. No file
	// stratum writes holds a credential in it: it is minted in memory, for
	// minutes, only to write ClusterAdminsGroup's binding when the admin
	// credential cannot (clusteradmins.Ensure).
	MastersGroup = "system:masters"
)

// Base names (without .crt/.key) of the node's leaves, relative to
// version.PKIDir.
const (
	APIServerLeaf              = "apiserver"
	APIServerEtcdClientLeaf    = "apiserver-etcd-client"
	APIServerKubeletClientLeaf = "apiserver-kubelet-client"
	FrontProxyClientLeaf       = "front-proxy-client"
	EtcdServerLeaf             = "etcd/server"
	EtcdPeerLeaf               = "etcd/peer"
	EtcdClientLeaf             = "etcd/healthcheck-client"
	AdminLeaf                  = "admin"
)

// apiServerDNSNames are the in-cluster names of the kubernetes service the
// apiserver certificate always carries.
var apiServerDNSNames = []string{
	"kubernetes",
	"kubernetes.default",
	"kubernetes.default.svc",
	"kubernetes.default.svc.cluster.local",
	"localhost",
}

// loopback is the IPv4 loopback address local clients dial.
var loopback = net.IPv4(127, 0, 0, 1)

// nodeLeaf is one leaf of a node: its base file name, its issuer and its spec.
type nodeLeaf struct {
	name string
	ca   *CA
	spec LeafSpec
}

// nodeLeafSpecs lists the leaves of the node named hostname at nodeIP.
func nodeLeafSpecs(s *Shared, hostname string, nodeIP net.IP, sans *APISANs) []nodeLeaf {
	apiDNS := append([]string{hostname}, apiServerDNSNames...)
	apiIPs := []net.IP{nodeIP, loopback}
	if sans != nil {
		apiDNS = append(apiDNS, sans.DNSNames...)
		apiIPs = append(apiIPs, sans.IPs...)
	}
	return []nodeLeaf{
		{APIServerLeaf, s.Cluster, LeafSpec{
			CommonName: APIServerCN, DNSNames: dedupNames(apiDNS), IPs: dedupIPs(apiIPs), Server: true,
		}},
		{APIServerEtcdClientLeaf, s.Etcd, LeafSpec{CommonName: APIServerEtcdClientCN, Client: true}},
		{APIServerKubeletClientLeaf, s.Cluster, LeafSpec{
			CommonName: APIServerKubeletClientCN, Organization: []string{ClusterAdminsGroup}, Client: true,
		}},
		{FrontProxyClientLeaf, s.FrontProxy, LeafSpec{CommonName: FrontProxyClientCN, Client: true}},
		{EtcdServerLeaf, s.Etcd, LeafSpec{
			CommonName: hostname, DNSNames: dedupNames([]string{hostname, "localhost"}),
			IPs: dedupIPs([]net.IP{nodeIP, loopback}), Server: true, Client: true,
		}},
		// etcd checks a peer's client certificate against the address the
		// connection comes from; a peer dialing a loopback address (a
		// single-machine cluster, the simulator) comes from 127.0.0.1.
		{EtcdPeerLeaf, s.Etcd, LeafSpec{
			CommonName: hostname, DNSNames: []string{hostname},
			IPs: dedupIPs([]net.IP{nodeIP, loopback}), Server: true, Client: true,
		}},
		{EtcdClientLeaf, s.Etcd, LeafSpec{CommonName: EtcdClientCN, Client: true}},
		{AdminLeaf, s.Cluster, LeafSpec{CommonName: AdminCN, Organization: []string{ClusterAdminsGroup}, Client: true}},
	}
}

// NodeLeaves issues this node's leaf certificates from the shared CAs and
// returns them, with their keys, by file name relative to version.PKIDir (the
// names NodeLeafNames lists):
//
//   - apiserver: server, cluster CA; CN kube-apiserver; DNS hostname, the
//     kubernetes service names, localhost and sans.DNSNames; IPs nodeIP,
//     127.0.0.1 and sans.IPs (the caller puts the VIP and the first service
//     IP there).
//   - apiserver-etcd-client: client, etcd CA.
//   - apiserver-kubelet-client: client, cluster CA, O stratum:cluster-admins.
//   - front-proxy-client: client, front-proxy CA.
//   - etcd/server: server and client, etcd CA; CN hostname; DNS hostname,
//     localhost; IPs nodeIP, 127.0.0.1.
//   - etcd/peer: server and client, etcd CA; CN hostname; DNS hostname; IPs
//     nodeIP, 127.0.0.1 (etcd matches a peer's certificate to the address it
//     connects from, and a loopback connection comes from 127.0.0.1).
//   - etcd/healthcheck-client: client, etcd CA; CN stratum-etcd-client, the
//     certificate stratum's own etcd client dials with.
//   - admin: client, cluster CA; CN kubernetes-admin, O stratum:cluster-admins.
//
// Names and addresses are deduplicated, so a VIP equal to the node IP or a
// repeated name does not appear twice.
func NodeLeaves(s *Shared, hostname string, nodeIP net.IP, sans *APISANs, now time.Time) (map[string][]byte, error) {
	if err := checkNodeLeafArgs(s, hostname, nodeIP); err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	for _, l := range nodeLeafSpecs(s, hostname, nodeIP, sans) {
		certPEM, keyPEM, err := l.ca.Issue(l.spec, now)
		if err != nil {
			return nil, fmt.Errorf("issue node certificates for %s: %s: %w", hostname, l.name, err)
		}
		out[l.name+".crt"] = certPEM
		out[l.name+".key"] = keyPEM
	}
	return out, nil
}

// RenewNodeLeaves is NodeLeaves for a renewal that keeps each leaf's key,
// as kubeadm's does: readKey returns the key file of a leaf ("etcd/peer.key")
// as it is on the node. A key that is there and parses is kept and only its
// certificate is reissued, so a renewal stopped part-way (a crash, a full
// disk) leaves every pair matching, over the old certificate or the new one.
// A key that is missing or does not parse is made anew; it is among newKeys,
// to be written before its certificate. Any other read error fails the
// renewal before anything is issued.
func RenewNodeLeaves(s *Shared, hostname string, nodeIP net.IP, sans *APISANs, now time.Time, readKey func(name string) ([]byte, error)) (certs, newKeys map[string][]byte, err error) {
	if err := checkNodeLeafArgs(s, hostname, nodeIP); err != nil {
		return nil, nil, err
	}
	certs, newKeys = map[string][]byte{}, map[string][]byte{}
	for _, l := range nodeLeafSpecs(s, hostname, nodeIP, sans) {
		keyName := l.name + ".key"
		keyPEM, err := readKey(keyName)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("renew node certificates for %s: read the key %s: %w", hostname, keyName, err)
		}
		var certPEM []byte
		if key, perr := ParseKey(keyPEM); err == nil && perr == nil {
			certPEM, err = l.ca.IssueFor(l.spec, key, now)
		} else {
			certPEM, keyPEM, err = l.ca.Issue(l.spec, now)
			newKeys[keyName] = keyPEM
		}
		if err != nil {
			return nil, nil, fmt.Errorf("renew node certificates for %s: %s: %w", hostname, l.name, err)
		}
		certs[l.name+".crt"] = certPEM
	}
	return certs, newKeys, nil
}

// checkNodeLeafArgs refuses what no node leaf can be issued from.
func checkNodeLeafArgs(s *Shared, hostname string, nodeIP net.IP) error {
	switch {
	case s == nil || s.Cluster == nil || s.FrontProxy == nil || s.Etcd == nil:
		return errors.New("issue node certificates: shared CAs are incomplete")
	case hostname == "":
		return errors.New("issue node certificates: hostname is empty")
	case nodeIP == nil || nodeIP.IsUnspecified():
		return fmt.Errorf("issue node certificates for %s: node IP %v is not an address", hostname, nodeIP)
	}
	return nil
}

// NodeLeafNames lists the names of the files NodeLeaves returns, relative to
// version.PKIDir, sorted.
func NodeLeafNames() []string {
	var names []string
	for _, base := range []string{
		APIServerLeaf, APIServerEtcdClientLeaf, APIServerKubeletClientLeaf, FrontProxyClientLeaf,
		EtcdServerLeaf, EtcdPeerLeaf, EtcdClientLeaf, AdminLeaf,
	} {
		names = append(names, base+".crt", base+".key")
	}
	slices.Sort(names)
	return names
}

// dedupNames drops empty and repeated DNS names (compared without case, as
// DNS does), keeping the first spelling and the order.
func dedupNames(names []string) []string {
	seen := make(map[string]bool, len(names))
	var out []string
	for _, n := range names {
		k := strings.ToLower(n)
		if n == "" || seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, n)
	}
	return out
}

// dedupIPs drops nil and repeated addresses (an IPv4 address in its 4- and
// 16-byte forms is one), keeping the order.
func dedupIPs(ips []net.IP) []net.IP {
	var out []net.IP
	for _, ip := range ips {
		if ip == nil || slices.ContainsFunc(out, ip.Equal) {
			continue
		}
		out = append(out, ip)
	}
	return out
}

// APIServerLeafFor issues only the apiserver serving certificate of the node
// named hostname at nodeIP, from the cluster CA, with the same names and
// addresses NodeLeaves gives it. A node whose apiserver certificate must be
// reissued to cover a new address (the VIP) replaces just that pair, leaving
// the etcd and client leaves its running services use as they are.
func APIServerLeafFor(cluster *CA, hostname string, nodeIP net.IP, sans *APISANs, now time.Time) (certPEM, keyPEM []byte, err error) {
	switch {
	case cluster == nil:
		return nil, nil, errors.New("issue the apiserver certificate: no cluster CA")
	case hostname == "":
		return nil, nil, errors.New("issue the apiserver certificate: hostname is empty")
	case nodeIP == nil || nodeIP.IsUnspecified():
		return nil, nil, fmt.Errorf("issue the apiserver certificate for %s: node IP %v is not an address", hostname, nodeIP)
	}
	spec := nodeLeafSpecs(&Shared{Cluster: cluster}, hostname, nodeIP, sans)[0]
	if spec.name != APIServerLeaf {
		return nil, nil, fmt.Errorf("issue the apiserver certificate: leaf table starts with %s", spec.name)
	}
	certPEM, keyPEM, err = cluster.Issue(spec.spec, now)
	if err != nil {
		return nil, nil, fmt.Errorf("issue the apiserver certificate for %s: %w", hostname, err)
	}
	return certPEM, keyPEM, nil
}
