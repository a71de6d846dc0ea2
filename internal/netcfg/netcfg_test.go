package netcfg

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c       Config
		wantErr string
	}{
		{Config{}.WithDefaults(), ""},
		{Config{PodCIDR: "10.244.0.0/16,fd00:10:244::/56", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "x.local"}, ""},
		{Config{PodCIDR: "10.96.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "c"}, "overlaps"},
		{Config{PodCIDR: "nope", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "c"}, "pod CIDR"},
		{Config{PodCIDR: "10.1.0.0/16,10.2.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "c"}, "one IPv4 and one IPv6"},
		{Config{PodCIDR: "10.1.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDomain: ""}, "DNS domain"},
		{Config{PodCIDR: "10.1.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "Bad_Domain!"}, "DNS domain"},
		{Config{PodCIDR: "10.1.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "cluster.local."}, "DNS domain"},
		{Config{PodCIDR: "10.1.0.0/16", ServiceCIDR: "10.96.0.0/28", ClusterDomain: "c"}, ""},
		{Config{PodCIDR: "10.1.0.0/16", ServiceCIDR: "10.96.0.0/29", ClusterDomain: "c"}, "service CIDR 10.96.0.0/29 is too small: it must hold the cluster DNS address, its tenth (10.96.0.10"},
		{Config{PodCIDR: "10.1.0.0/16,fd00:10:244::/56", ServiceCIDR: "10.96.0.0/30,fd00:10:96::/112", ClusterDomain: "c"}, "too small"},
	} {
		err := tc.c.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.c, err, tc.wantErr)
		}
	}
}

// A malformed field is named in plain words, with an example, and without
// the Go function or regular expression the check used.
func TestValidateSaysWhatIsWrongInPlainWords(t *testing.T) {
	ok := Config{}.WithDefaults()
	long := strings.Repeat("a", 250) + ".local"
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{PodCIDR: "garbage", ServiceCIDR: ok.ServiceCIDR, ClusterDomain: ok.ClusterDomain},
			`pod CIDR "garbage" is not a CIDR (like 10.244.0.0/16)`},
		{Config{PodCIDR: "10.244.0.0/33", ServiceCIDR: ok.ServiceCIDR, ClusterDomain: ok.ClusterDomain},
			`pod CIDR "10.244.0.0/33" is not a CIDR (like 10.244.0.0/16)`},
		{Config{PodCIDR: ok.PodCIDR, ServiceCIDR: "10.96.0.0", ClusterDomain: ok.ClusterDomain},
			`service CIDR "10.96.0.0" is not a CIDR (like 10.96.0.0/12)`},
		{Config{PodCIDR: "10.244.0.0/16,fd00::", ServiceCIDR: ok.ServiceCIDR, ClusterDomain: ok.ClusterDomain},
			`pod CIDR "10.244.0.0/16,fd00::": "fd00::" is not a CIDR (like 10.244.0.0/16)`},
		{Config{PodCIDR: ok.PodCIDR, ServiceCIDR: ok.ServiceCIDR, ClusterDomain: "Bad_Domain!"},
			`cluster domain "Bad_Domain!" is not a DNS domain (like cluster.local): want lower-case letters, digits, '-' and '.', starting and ending with a letter or digit`},
		{Config{PodCIDR: ok.PodCIDR, ServiceCIDR: ok.ServiceCIDR, ClusterDomain: long},
			`it has 256 characters, at most 253 are allowed`},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.c, err, tc.want)
			continue
		}
		for _, internal := range []string{"netip", "ParsePrefix", "regex", "RFC 1123"} {
			if strings.Contains(err.Error(), internal) {
				t.Errorf("Validate(%+v) = %v: names %q", tc.c, err, internal)
			}
		}
	}
	if _, err := (Config{ServiceCIDR: "nope"}).FirstServiceIP(); err == nil || err.Error() != `service CIDR "nope" is not a CIDR (like 10.96.0.0/12)` {
		t.Errorf("FirstServiceIP of a malformed range = %v", err)
	}
}

func TestFirstServiceIP(t *testing.T) {
	ip, err := Config{ServiceCIDR: "10.96.0.0/12"}.FirstServiceIP()
	if err != nil || ip.String() != "10.96.0.1" {
		t.Fatalf("FirstServiceIP = %v, %v", ip, err)
	}
}

// TestClusterDNSIP: the tenth address of the first service range, as
// kubeadm gives the cluster DNS Service.
func TestClusterDNSIP(t *testing.T) {
	for cidr, want := range map[string]string{"10.96.0.0/12": "10.96.0.10", "10.96.5.7/24": "10.96.5.10", "fd00:10:96::/112,10.96.0.0/12": "fd00:10:96::a"} {
		if got, err := (Config{ServiceCIDR: cidr}).ClusterDNSIP(); err != nil || got.String() != want {
			t.Errorf("ClusterDNSIP(%s) = %v, %v; want %s", cidr, got, err, want)
		}
	}
}

func TestCheckJoin(t *testing.T) {
	cluster := Config{}.WithDefaults()
	if err := CheckJoin(cluster, Config{}); err != nil {
		t.Fatalf("unset fields refused: %v", err)
	}
	if err := CheckJoin(cluster, Config{PodCIDR: "10.244.0.1/16"}); err != nil {
		t.Fatalf("the same range written unmasked refused: %v", err)
	}
	err := CheckJoin(cluster, Config{PodCIDR: "10.200.0.0/16", ClusterDomain: "other.local"})
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "pod CIDR") || !strings.Contains(err.Error(), "cluster domain") {
		t.Fatalf("mismatch = %v", err)
	}
}

// TestCheckNodeIP: the node IP and the first service range must be of one
// family, as kube-apiserver demands of its advertise address; the refusal
// names both and what to give.
func TestCheckNodeIP(t *testing.T) {
	for _, c := range []struct {
		ip, svc, want string
	}{
		{"10.0.0.11", "", ""},
		{"fd00::11", "fd00:10::/108", ""},
		{"10.0.0.11", "10.96.0.0/12,fd00:10::/108", ""},
		{"fd00::11", "fd00:10::/108,10.96.0.0/12", ""},
		{"fd00::11", "", "node IP fd00::11 is IPv6 and the service CIDR 10.96.0.0/12 begins with an IPv4 range"},
		{"fd00::11", "10.96.0.0/12,fd00:10::/108", "give an IPv4 node IP (--node-ip; on a dual-stack node its IPv4 address first), or a service CIDR whose first range is IPv6"},
		{"10.0.0.11", "fd00:10::/108", "node IP 10.0.0.11 is IPv4"},
		{"nonsense", "", "not an IP address"},
	} {
		err := Config{ServiceCIDR: c.svc}.WithDefaults().CheckNodeIP(c.ip, true)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckNodeIP(%s) with service CIDR %q = %v, want %q", c.ip, c.svc, err, c.want)
		}
	}
}

// TestCheckOutsideRanges: an address of the node network inside the pod or
// service range is refused, naming both and what to change.
func TestCheckOutsideRanges(t *testing.T) {
	for _, c := range []struct {
		what, ip, pods, svcs string
		here                 bool
		want                 string
	}{
		{"node IP", "192.168.1.11", "", "", true, ""},
		{"node IP", "192.168.1.11", "192.168.0.0/16", "", true, "node IP 192.168.1.11 lies inside the pod CIDR 192.168.0.0/16"},
		{"node IP", "192.168.1.11", "192.168.0.0/16", "", true, "(--pod-cidr, or spec.network in the config file)"},
		{"VIP", "10.96.0.10", "", "", true, "VIP 10.96.0.10 lies inside the service CIDR 10.96.0.0/12"},
		{"node IP", "fd00:10::5", "10.244.0.0/16,fd00::/56", "10.96.0.0/12,fd00:10::/108", true, "node IP fd00:10::5 lies inside the service CIDR fd00:10::/108"},
		{"node IP", "10.244.3.4", "", "", false, "the pod CIDR is the cluster's: choose a node IP outside it"},
		{"node IP", "10.245.0.1", "", "", false, ""},
		{"node IP", "nonsense", "", "", true, "not an IP address"},
	} {
		err := Config{PodCIDR: c.pods, ServiceCIDR: c.svcs}.WithDefaults().CheckOutsideRanges(c.what, c.ip, c.here)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("CheckOutsideRanges(%s %s) with pods %q services %q = %v, want %q", c.what, c.ip, c.pods, c.svcs, err, c.want)
		}
	}
}

// TestCheckNodeIPOfAJoin: a joiner cannot change the cluster's service
// range, so its refusal names only the node IP to give.
func TestCheckNodeIPOfAJoin(t *testing.T) {
	err := Config{}.WithDefaults().CheckNodeIP("fd00::12", false)
	if err == nil || !strings.Contains(err.Error(), "give an IPv4 node IP") || strings.Contains(err.Error(), "or a service CIDR") {
		t.Fatalf("CheckNodeIP of a join = %v; want the node IP alone as the remedy", err)
	}
}

// TestCheckEachJudgesAFieldAlone: each field set is checked on its own, and
// none against another (a range given by a flag may meet a file's, or a
// default, that Validate judges once merged).
func TestCheckEachJudgesAFieldAlone(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string // "" for none
	}{
		{Config{}, ""},
		{Config{PodCIDR: "10.244.0.0/16"}, ""},
		{Config{ServiceCIDR: "10.244.0.0/16"}, ""}, // the default pod range's: not judged here
		{Config{PodCIDR: "banana"}, `pod CIDR "banana" is not a CIDR`},
		{Config{ServiceCIDR: "10.96.0.0/33"}, "service CIDR"},
		{Config{ServiceCIDR: "10.96.0.0/29"}, "too small"},
		{Config{ClusterDomain: "Bad_Domain!"}, `cluster domain "Bad_Domain!" is not a DNS domain`},
	} {
		err := tc.c.CheckEach()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.CheckEach() = %v, want %q", tc.c, err, tc.want)
		}
	}
}
