package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = `apiVersion: stratum.dev/v1alpha1
kind: ControlPlaneConfig
spec:
  network:
    nodeIP: 10.0.0.11
    podCIDR: 10.244.0.0/16,fd00:10:244::/56
    serviceCIDR: 10.96.0.0/12
    clusterDomain: example.internal
    cilium:
      enabled: true
      kubeProxyReplacement: true
  vip: 10.0.0.10
  profile: cis
  selinux: true
  etcd:
    quota: 4Gi
`

func TestParseGood(t *testing.T) {
	f, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Spec
	if s.Network.NodeIP != "10.0.0.11" || s.VIP != "10.0.0.10" || s.Profile != "cis" || s.SELinuxOptOut() || s.Network.Cilium == nil || !s.Network.Cilium.KubeProxyReplacement || s.EtcdQuotaBytes() != 4<<30 {
		t.Fatalf("parsed %+v", s)
	}
	path := filepath.Join(t.TempDir(), "stratum.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{"---\n" + good, good + "---\n", good + "...\n", "---\n" + good + "---\n# end\n", good + "---\n~\n"} {
		if _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("Parse(%q) = %v, want one document", doc, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestParseRefusalsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown key", strings.Replace(good, "  vip:", "  vips:", 1), `unknown field "spec.vips"`},
		{"key in the wrong case", strings.Replace(good, "podCIDR", "podCidr", 1), `unknown field "spec.network.podCidr"`},
		{"wrong version", strings.Replace(good, "v1alpha1", "v9", 1), "apiVersion"},
		{"wrong kind", strings.Replace(good, "ControlPlaneConfig", "Cluster", 1), "kind"},
		{"bad node IP", strings.Replace(good, "nodeIP: 10.0.0.11", "nodeIP: ten", 1), "spec.network.nodeIP"},
		{"bad pod CIDR", strings.Replace(good, "podCIDR: 10.244.0.0/16,", "podCIDR: 10.244.0.0/99,", 1), "spec.network.podCIDR"},
		{"bad domain", strings.Replace(good, "example.internal", "Bad_Domain!", 1), "spec.network.clusterDomain"},
		{"bad VIP", strings.Replace(good, "vip: 10.0.0.10", "vip: nope", 1), "spec.vip"},
		{"IPv6 VIP", strings.Replace(good, "vip: 10.0.0.10", `vip: "fd00::10"`, 1), "spec.vip fd00::10: not an IPv4 address"},
		{"IPv4-mapped VIP", strings.Replace(good, "vip: 10.0.0.10", `vip: "::ffff:10.0.0.10"`, 1), "not an IPv4 address"},
		{"VIP is the node", strings.Replace(good, "vip: 10.0.0.10", "vip: 10.0.0.11", 1), "spec.vip 10.0.0.11 is spec.network.nodeIP"},
		{"etcd quota over 8 GiB", strings.Replace(good, "quota: 4Gi", "quota: 16Gi", 1), "spec.etcd.quota: etcd quota 16.0 GiB: want 16.0 MiB to 8.0 GiB"},
		{"etcd quota not a size", strings.Replace(good, "quota: 4Gi", "quota: big", 1), "spec.etcd.quota: etcd quota \"big\": not a size"},
		{"selinux not a bool", strings.Replace(good, "selinux: true", "selinux: maybe", 1), "selinux"},
		{"empty", "", "empty"},
		{"duplicate key", strings.Replace(good, "  vip: 10.0.0.10\n", "  vip: 10.0.0.10\n  vip: 10.0.0.12\n", 1), `line 13: key "vip" already set in map`},
		{"duplicate nested key", strings.Replace(good, "    nodeIP: 10.0.0.11\n", "    nodeIP: 10.0.0.11\n    nodeIP: 10.0.0.13\n", 1), `line 6: key "nodeIP" already set in map`},
		{"duplicate key in a flow mapping", strings.Replace(good, "    cilium:\n      enabled: true\n      kubeProxyReplacement: true\n", "    cilium: {enabled: true, kubeProxyReplacement: true, enabled: false}\n", 1), `key "enabled" already set in map`},
		{"duplicate key, the last of which is valid", "apiVersion: stratum.dev/v1alpha1\nkind: ControlPlaneConfig\nspec: {vip: 10.0.0.10, vip: 10.0.0.12}\n", `key "vip" already set in map`},
		{"duplicate top-level key", good + "kind: ControlPlaneConfig\n", `key "kind" already set in map`},
		{"second document", good + "---\n" + strings.Replace(good, "10.0.0.10", "10.0.0.12", 1), "2 documents; stratum reads one"},
		{"invalid second document", good + "---\n[not yaml\n", "line 18: did not find expected"},
		{"document after an empty one", "---\n---\n" + good, "2 documents; stratum reads one"},
		{"three documents", good + "---\nkind: x\n---\nkind: y\n---\n", "3 documents; stratum reads one"},
		{"a merged key set again", "apiVersion: stratum.dev/v1alpha1\nkind: ControlPlaneConfig\nx-net: &net {podCIDR: 10.244.0.0/16}\nspec:\n  network:\n    <<: *net\n    podCIDR: 10.50.0.0/16\n", "cannot be set again beside it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want ErrInvalid naming %q", err, tc.want)
			}
			path := filepath.Join(t.TempDir(), "stratum.yaml")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(path); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load = %v, want ErrInvalid naming %s and %q", err, path, tc.want)
			}
		})
	}
}
