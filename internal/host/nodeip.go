package host

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// NodeIPChoice is the address a node runs on and where it came from, so a
// command can say which of the sources won.
type NodeIPChoice struct {
	IP string
	// Source is "flag" (--node-ip), "saved" (the node state of an earlier
	// bring-up), "config" (spec.network.nodeIP), "env" ($NODE_IP) or
	// "detected".
	Source string
}

func (c NodeIPChoice) String() string { return c.IP + " (from " + c.Source + ")" }

// ResolveNodeIP picks the node's address by precedence: the flag, the saved
// address, the config, $NODE_IP, then detect. A saved address outranks the
// config so that a node whose config changed does not silently move: moving
// a control plane's address invalidates its certificates and its etcd peer
// URL, and is refused elsewhere unless asked for with the flag. Every explicit
// value must be a valid IP address, or "v4,v6" for a dual-stack node (as
// detection gives it); an invalid one is an error naming its source, never
// skipped for the next.
func ResolveNodeIP(flag, config, state string, detect func() (string, error)) (NodeIPChoice, error) {
	for _, c := range []NodeIPChoice{
		{flag, "flag"}, {state, "saved"}, {config, "config"}, {strings.TrimSpace(os.Getenv("NODE_IP")), "env"},
	} {
		if c.IP == "" {
			continue
		}
		ip, err := ParseNodeIP(c.IP)
		if err != nil {
			return NodeIPChoice{}, fmt.Errorf("node IP %q from %s %w", c.IP, c.Source, err)
		}
		return NodeIPChoice{IP: ip, Source: c.Source}, nil
	}
	if detect == nil {
		return NodeIPChoice{}, errors.New("no node IP given (--node-ip, spec.network.nodeIP or $NODE_IP) and no way to detect one")
	}
	ip, err := detect()
	if err != nil {
		return NodeIPChoice{}, fmt.Errorf("detect the node IP: %w; pass --node-ip", err)
	}
	return NodeIPChoice{IP: ip, Source: "detected"}, nil
}

// ParseNodeIP is an explicit node IP value in its canonical form: one
// address, or two of different families, "v4,v6", for a dual-stack node (the
// first is the node's primary address, which etcd and the apiserver
// advertise). Each must be an address a node can have. Its error completes
// "node IP X ...".
func ParseNodeIP(v string) (string, error) {
	parts := strings.Split(v, ",")
	if len(parts) > 2 {
		return "", errors.New("names more than two addresses (one, or v4,v6 for a dual-stack node)")
	}
	var out []string
	var families []bool
	for _, p := range parts {
		ip, err := netip.ParseAddr(strings.TrimSpace(p))
		if err != nil {
			return "", errors.New("is not an IP address (or v4,v6 for a dual-stack node)")
		}
		if ip.IsUnspecified() || ip.IsMulticast() {
			return "", fmt.Errorf("holds %s, which cannot be a node's address", ip)
		}
		out, families = append(out, ip.String()), append(families, ip.Is4())
	}
	if len(families) == 2 && families[0] == families[1] {
		return "", errors.New("names two addresses of one family: a dual-stack node's are one IPv4 and one IPv6")
	}
	return strings.Join(out, ","), nil
}

// ErrNoNodeAddress matches a detection that found no address a node may run
// on: a host whose only addresses are loopback (or link-local) ones. Its
// etcd peer URL would be 127.0.0.1, which no other node can reach, so
// detection refuses rather than pick it; an explicit --node-ip 127.0.0.1
// (a single-node cluster) is still taken.
var ErrNoNodeAddress = errors.New("no non-loopback address")

// DetectNodeIPs picks the node's address from the host's NodeAddresses: the
// first IPv4 one, or, for a dual-stack cluster, "v4,v6" with the first IPv6
// one as well. On a real machine that is the default route's interface's
// address (apimachinery's ChooseHostInterface); pass --node-ip to choose
// another. A host with no such address is refused (ErrNoNodeAddress).
func DetectNodeIPs(n Network, dualStack bool) (string, error) {
	addrs, err := n.NodeAddresses()
	if err != nil {
		return "", err
	}
	if len(addrs) == 0 {
		if all, err := n.Addresses(); err == nil && len(all) > 0 {
			return "", fmt.Errorf("this host has only %s: %w", joinAddrs(all), ErrNoNodeAddress)
		}
		return "", ErrNoNodeAddress
	}
	var v4, v6 netip.Addr
	for _, a := range addrs {
		switch {
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		}
	}
	if !v4.IsValid() {
		return "", fmt.Errorf("the host has no IPv4 address to run on (it has %s)", joinAddrs(addrs))
	}
	if !dualStack {
		return v4.String(), nil
	}
	if !v6.IsValid() {
		return "", fmt.Errorf("the cluster is dual-stack but the host has no IPv6 address to run on (it has %s)", joinAddrs(addrs))
	}
	return v4.String() + "," + v6.String(), nil
}

// netInterface is one network interface as node-IP detection weighs it.
type netInterface struct {
	Name string
	// Up, Loopback and PointToPoint are the interface's flags.
	Up, Loopback, PointToPoint bool
	Addrs                      []netip.Addr
}

// nodeAddressOrder is the candidates node-IP detection chooses from, best
// first, by apimachinery's ChooseHostInterface rules: preferred (the
// addresses ChooseHostInterface picked, from the default route's interface)
// first, then the addresses of every interface that is up and neither
// loopback nor point-to-point — the library's own rule for a host without
// route information, here also a host without a default route. Only global
// unicast addresses count: never loopback, link-local, multicast or
// unspecified. Each address is listed once.
func nodeAddressOrder(preferred []netip.Addr, ifaces []netInterface) []netip.Addr {
	var out []netip.Addr
	add := func(a netip.Addr) {
		a = a.Unmap()
		if a.IsGlobalUnicast() && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, a := range preferred {
		add(a)
	}
	for _, i := range ifaces {
		if !i.Up || i.Loopback || i.PointToPoint {
			continue
		}
		for _, a := range i.Addrs {
			add(a)
		}
	}
	return out
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
