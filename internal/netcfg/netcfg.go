// Package netcfg is a cluster's network: its pod and service ranges and its
// DNS domain. Every control plane must agree on it, so a join compares the
// cluster's (which rides in with the shared certificates) against its own
// configuration and refuses a difference instead of overriding it.
package netcfg

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults of a stock cluster.
const (
	DefaultPodCIDR       = "10.244.0.0/16"
	DefaultServiceCIDR   = "10.96.0.0/12"
	DefaultClusterDomain = "cluster.local"
)

// Config is the cluster's network. CIDR fields hold one range, or two
// ("v4,v6") for a dual-stack cluster.
type Config struct {
	PodCIDR       string `json:"podCIDR"`
	ServiceCIDR   string `json:"serviceCIDR"`
	ClusterDomain string `json:"clusterDomain"`
}

// WithDefaults fills empty fields with the stock values.
func (c Config) WithDefaults() Config {
	if c.PodCIDR == "" {
		c.PodCIDR = DefaultPodCIDR
	}
	if c.ServiceCIDR == "" {
		c.ServiceCIDR = DefaultServiceCIDR
	}
	if c.ClusterDomain == "" {
		c.ClusterDomain = DefaultClusterDomain
	}
	return c
}

func parseRanges(field, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", field, s, err)
		}
		out = append(out, p.Masked())
	}
	if len(out) > 2 || len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return nil, fmt.Errorf("%s %q: want one range, or one IPv4 and one IPv6 range", field, s)
	}
	return out, nil
}

// Validate checks every field parses and the pod and service ranges do not
// overlap.
func (c Config) Validate() error {
	pods, err := parseRanges("pod CIDR", c.PodCIDR)
	if err != nil {
		return err
	}
	svcs, err := parseRanges("service CIDR", c.ServiceCIDR)
	if err != nil {
		return err
	}
	for _, p := range pods {
		for _, s := range svcs {
			if p.Overlaps(s) {
				return fmt.Errorf("pod CIDR %s overlaps service CIDR %s", p, s)
			}
		}
	}
	if errs := validation.IsDNS1123Subdomain(c.ClusterDomain); len(errs) > 0 {
		return fmt.Errorf("cluster domain %q is not a DNS domain: %s", c.ClusterDomain, strings.Join(errs, "; "))
	}
	return nil
}

// DualStack reports whether the pod range has both families.
func (c Config) DualStack() bool { return strings.Contains(c.PodCIDR, ",") }

// FirstServiceIP is the first address of the (first) service range: the
// kubernetes Service's ClusterIP, which the apiserver certificate must cover.
func (c Config) FirstServiceIP() (netip.Addr, error) {
	svcs, err := parseRanges("service CIDR", c.ServiceCIDR)
	if err != nil {
		return netip.Addr{}, err
	}
	return svcs[0].Addr().Next(), nil
}

// ErrMismatch matches a joiner's configuration that differs from the cluster's.
var ErrMismatch = errors.New("network differs from the cluster's")

// CheckJoin compares a joiner's configured network (empty fields: not set,
// nothing to compare) with the cluster's, naming every field that differs.
func CheckJoin(cluster, mine Config) error {
	var diffs []string
	cmp := func(field, theirs, ours string) {
		if ours != "" && !sameRanges(theirs, ours) {
			diffs = append(diffs, fmt.Sprintf("%s: cluster has %s, this node is configured with %s", field, theirs, ours))
		}
	}
	cmp("pod CIDR", cluster.PodCIDR, mine.PodCIDR)
	cmp("service CIDR", cluster.ServiceCIDR, mine.ServiceCIDR)
	if mine.ClusterDomain != "" && mine.ClusterDomain != cluster.ClusterDomain {
		diffs = append(diffs, fmt.Sprintf("cluster domain: cluster has %s, this node is configured with %s", cluster.ClusterDomain, mine.ClusterDomain))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w (%s): a joining control plane cannot change it; remove the setting or make it match", ErrMismatch, strings.Join(diffs, "; "))
	}
	return nil
}

func sameRanges(a, b string) bool {
	pa, errA := parseRanges("", a)
	pb, errB := parseRanges("", b)
	if errA != nil || errB != nil || len(pa) != len(pb) {
		return a == b
	}
	for i := range pa {
		if pa[i] != pb[i] {
			return false
		}
	}
	return true
}
