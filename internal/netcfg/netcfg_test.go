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
	} {
		err := tc.c.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.c, err, tc.wantErr)
		}
	}
}

func TestFirstServiceIP(t *testing.T) {
	ip, err := Config{ServiceCIDR: "10.96.0.0/12"}.FirstServiceIP()
	if err != nil || ip.String() != "10.96.0.1" {
		t.Fatalf("FirstServiceIP = %v, %v", ip, err)
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
