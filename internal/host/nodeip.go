package host

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
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
// value must be a valid IP address; an invalid one is an error naming its
// source, never skipped for the next.
func ResolveNodeIP(flag, config, state string, detect func() (string, error)) (NodeIPChoice, error) {
	for _, c := range []NodeIPChoice{
		{flag, "flag"}, {state, "saved"}, {config, "config"}, {strings.TrimSpace(os.Getenv("NODE_IP")), "env"},
	} {
		if c.IP == "" {
			continue
		}
		ip, err := netip.ParseAddr(c.IP)
		if err != nil {
			return NodeIPChoice{}, fmt.Errorf("node IP %q from %s is not an IP address", c.IP, c.Source)
		}
		if ip.IsUnspecified() || ip.IsMulticast() {
			return NodeIPChoice{}, fmt.Errorf("node IP %s from %s cannot be a node's address", c.IP, c.Source)
		}
		return NodeIPChoice{IP: ip.String(), Source: c.Source}, nil
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

// DetectNodeIPs picks the node's address from the host's own: the first
// IPv4 address, or, for a dual-stack cluster, "v4,v6" with the first IPv6
// address as well. A host with several candidates gets the first in the
// kernel's order; pass --node-ip to choose another.
func DetectNodeIPs(n Network, dualStack bool) (string, error) {
	addrs, err := n.Addresses()
	if err != nil {
		return "", err
	}
	var v4, v6 netip.Addr
	for _, a := range addrs {
		switch {
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !a.IsLinkLocalUnicast() && !v6.IsValid():
			v6 = a
		}
	}
	if !v4.IsValid() {
		return "", fmt.Errorf("the host has no IPv4 address (it has %v)", addrs)
	}
	if !dualStack {
		return v4.String(), nil
	}
	if !v6.IsValid() {
		return "", fmt.Errorf("the cluster is dual-stack but the host has no IPv6 address (it has %v)", addrs)
	}
	return v4.String() + "," + v6.String(), nil
}
