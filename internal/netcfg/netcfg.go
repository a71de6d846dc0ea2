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

// cidrExamples are the ranges a malformed field's message shows as examples.
var cidrExamples = map[string]string{
	"pod CIDR":     DefaultPodCIDR,
	"service CIDR": DefaultServiceCIDR,
}

// parseRanges parses field's value s: one range, or one IPv4 and one IPv6
// range separated by a comma. A part that is not a range is named in plain
// words (netip's own error names the Go function that failed).
func parseRanges(field, s string) ([]netip.Prefix, error) {
	example := cidrExamples[field]
	if example == "" {
		example = DefaultPodCIDR
	}
	parts := strings.Split(s, ",")
	var out []netip.Prefix
	for _, part := range parts {
		p, err := netip.ParsePrefix(strings.TrimSpace(part))
		if err != nil {
			if len(parts) == 1 {
				return nil, fmt.Errorf("%s %q is not a CIDR (like %s)", field, s, example)
			}
			return nil, fmt.Errorf("%s %q: %q is not a CIDR (like %s)", field, s, strings.TrimSpace(part), example)
		}
		out = append(out, p.Masked())
	}
	if len(out) > 2 || len(out) == 2 && out[0].Addr().Is4() == out[1].Addr().Is4() {
		return nil, fmt.Errorf("%s %q: want one range, or one IPv4 and one IPv6 range", field, s)
	}
	return out, nil
}

// CheckEach checks each field that is set, on its own: a range that does not
// parse, a service range too small to hold the cluster DNS address, a domain
// that is no DNS name. How the fields fit together (ranges that overlap) is
// Validate's, once every source of them (flags, a file, defaults) is merged.
func (c Config) CheckEach() error {
	if c.PodCIDR != "" {
		if _, err := parseRanges("pod CIDR", c.PodCIDR); err != nil {
			return err
		}
	}
	if c.ServiceCIDR != "" {
		if _, err := parseRanges("service CIDR", c.ServiceCIDR); err != nil {
			return err
		}
		if _, err := c.ClusterDNSIP(); err != nil {
			return err
		}
	}
	if c.ClusterDomain != "" {
		return CheckClusterDomain(c.ClusterDomain)
	}
	return nil
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
	if _, err := c.ClusterDNSIP(); err != nil {
		return err
	}
	return CheckClusterDomain(c.ClusterDomain)
}

// CheckOutsideRanges refuses an address of the node's own network (what
// names it: "node IP", "VIP") that lies inside the pod or service range.
// Pod and service traffic would then be routed away from the network the
// address is on, and stratum trusts the pod range in the host firewall
// (host.TrustPodCIDRs), so a pod range over the node network (Calico's
// default 192.168.0.0/16 on a 192.168.1.0/24 network) would open every
// control plane to every machine of that network. rangeChosenHere says
// whether the hint may name the flags (a bootstrap) or the ranges are the
// cluster's (a join).
func (c Config) CheckOutsideRanges(what, ip string, rangeChosenHere bool) error {
	a, err := netip.ParseAddr(strings.TrimSpace(ip))
	if err != nil {
		return fmt.Errorf("%s %q is not an IP address", what, ip)
	}
	a = a.Unmap()
	for _, r := range []struct{ field, flag, value, why string }{
		{"pod CIDR", "--pod-cidr", c.PodCIDR, "traffic to it would be routed as a pod's, and the pod range is trusted in the host firewall, which would open this host to its network"},
		{"service CIDR", "--service-cidr", c.ServiceCIDR, "traffic to it would be taken for a service's, which the cluster's service proxy routes"},
	} {
		ranges, err := parseRanges(r.field, r.value)
		if err != nil {
			return err
		}
		for _, p := range ranges {
			if !p.Contains(a) {
				continue
			}
			hint := fmt.Sprintf("choose a %s apart from the node network (%s, or spec.network in the config file)", r.field, r.flag)
			if !rangeChosenHere {
				hint = fmt.Sprintf("the %s is the cluster's: choose a %s outside it", r.field, what)
			}
			return fmt.Errorf("%s %s lies inside the %s %s: %s: %s", what, a, r.field, p, r.why, hint)
		}
	}
	return nil
}

// CheckNodeIP refuses a node IP (the primary, the first of "v4,v6") whose
// family is not the first service range's: kube-apiserver does not start
// with an advertise address of another family ("service IP family must
// match public address family"), which a join met only after its etcd
// member add.
//
// The hint names what to give: a node IP of the range's family (the first
// of --node-ip v4,v6 or v6,v4 on a dual-stack node), or, when the range is
// this node's to choose (a bootstrap, not a join of a cluster whose range
// is set), a service CIDR of the node IP's family first.
func (c Config) CheckNodeIP(ip string, rangeChosenHere bool) error {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Errorf("node IP %q is not an IP address", ip)
	}
	svcs, err := parseRanges("service CIDR", c.ServiceCIDR)
	if err != nil {
		return err
	}
	family := func(is4 bool) int {
		if is4 {
			return 4
		}
		return 6
	}
	node, svc := family(a.Unmap().Is4()), family(svcs[0].Addr().Is4())
	if node != svc {
		hint := fmt.Sprintf("give an IPv%d node IP (--node-ip; on a dual-stack node its IPv%d address first)", svc, svc)
		if rangeChosenHere {
			hint += fmt.Sprintf(", or a service CIDR whose first range is IPv%d", node)
		}
		return fmt.Errorf("node IP %s is IPv%d and the service CIDR %s begins with an IPv%d range: kube-apiserver needs its address and the first service range in one family: %s", ip, node, c.ServiceCIDR, svc, hint)
	}
	return nil
}

// CheckClusterDomain refuses a cluster domain that is not a DNS domain,
// saying in plain words what is wrong with it.
func CheckClusterDomain(d string) error {
	if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
		return fmt.Errorf("cluster domain %q is not a DNS domain (like %s): %s", d, DefaultClusterDomain, domainProblem(d, errs))
	}
	return nil
}

// domainProblem says in plain words what was wrong with d, whose RFC 1123
// subdomain check found the problems errs (the check's own text quotes its
// regular expression).
func domainProblem(d string, errs []string) string {
	var why []string
	tooLong := len(d) > validation.DNS1123SubdomainMaxLength
	if tooLong {
		why = append(why, fmt.Sprintf("it has %d characters, at most %d are allowed", len(d), validation.DNS1123SubdomainMaxLength))
	}
	if !tooLong || len(errs) > 1 {
		why = append(why, "want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit")
	}
	return strings.Join(why, "; ")
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

// ClusterDNSIP is the cluster DNS Service's address, the tenth of the
// (first) service range as kubeadm has it, which every kubelet is given. A
// range too small to hold it is an error Validate reports before a node
// writes anything.
func (c Config) ClusterDNSIP() (netip.Addr, error) {
	svcs, err := parseRanges("service CIDR", c.ServiceCIDR)
	if err != nil {
		return netip.Addr{}, err
	}
	ip := svcs[0].Masked().Addr()
	for range 10 {
		ip = ip.Next()
	}
	if !svcs[0].Contains(ip) {
		return netip.Addr{}, fmt.Errorf("service CIDR %s is too small: it must hold the cluster DNS address, its tenth (%s, from a /28 for IPv4)", svcs[0], ip)
	}
	return ip, nil
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
