package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/sim"
)

func writeConfig(t *testing.T, spec string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "stratum.yaml")
	doc := "apiVersion: stratum.dev/v1alpha1\nkind: ControlPlaneConfig\nspec:\n" + spec
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigFileRefusalsChangeNothing: a file that does not parse, a value
// the bring-up refuses, and a flag whose range overlaps the file's are each
// refused with the key named and nothing written (a flag bad on its own is
// bad usage: TestUpRefusesBadOptionsBeforeWriting).
func TestConfigFileRefusalsChangeNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec string
		args []string
		want string
	}{
		{"unknown key", "  network:\n    podCidr: 10.1.0.0/16\n", nil, `unknown field "spec.network.podCidr"`},
		{"bad domain in the file", "  network:\n    clusterDomain: Bad_Domain!\n", nil, "spec.network.clusterDomain"},
		{"unknown profile in the file", "  profile: bogus\n", nil, `unknown profile "bogus"`},
		{"cis without SELinux", "  profile: cis\n  selinux: false\n", nil, "the cis profile requires SELinux; remove spec.selinux: false"},
		{"a flag meets the file's range", "  network:\n    podCIDR: 10.50.0.0/16\n", []string{"--service-cidr", "10.50.0.0/20"}, "pod CIDR 10.50.0.0/16 overlaps service CIDR 10.50.0.0/20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, h := onTempHost(t)
			args := append([]string{"up", "--node-ip", "127.0.0.1", "--config", writeConfig(t, tc.spec)}, tc.args...)
			code, _, errOut := runCLI(t, opts, args...)
			if code != ExitRefused || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "nothing was changed") {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if files := filesUnder(t, h.Root); len(files) != 0 {
				t.Fatalf("a refused up wrote %d files", len(files))
			}
		})
	}
}

// TestUpFromAConfigFile brings a control plane up from a file (on a
// simulated host with a real apiserver): the node state records the file's
// domain, ranges and VIP, and a flag given beside it wins.
func TestUpFromAConfigFile(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1, APIServers: true, VIP: true})
	d := c.Hosts()[0].Handle()
	opts := Options{Host: func() (host.Host, error) { return d, nil }}
	cfg := writeConfig(t, "  network:\n    podCIDR: 10.50.0.0/16\n    serviceCIDR: 10.96.0.0/12\n    clusterDomain: from-file.example\n  vip: "+c.VIPAddress().String()+"\n")
	if code, out, errOut := runCLI(t, opts, "up", "--config", cfg, "--pod-cidr", "10.60.0.0/16"); code != ExitOK {
		t.Fatalf("up --config: exit %d\n%s\n%s", code, out, errOut)
	}
	st, err := nodestate.Load(d)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClusterDomain != "from-file.example" || st.PodCIDR != "10.60.0.0/16" || st.VIP.Address != c.VIPAddress().String() {
		t.Fatalf("node state after up --config: domain %q, pod CIDR %q (the flag's), VIP %q", st.ClusterDomain, st.PodCIDR, st.VIP.Address)
	}
	// Run again as it was (a script at every boot): the saved control
	// plane starts. A network or profile it was not brought up with is
	// refused, naming what it has, where it was taken without a word.
	if code, out, errOut := runCLI(t, opts, "up", "--config", cfg, "--pod-cidr", "10.60.0.0/16"); code != ExitOK {
		t.Fatalf("the same up again: exit %d\n%s\n%s", code, out, errOut)
	}
	saved, _ := d.ReadFile(nodestate.Path)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pod-cidr", "10.70.0.0/16"}, "pod CIDR 10.70.0.0/16 (this control plane has 10.60.0.0/16)"},
		{[]string{"--cluster-domain", "other.example"}, "cluster domain other.example (this control plane has from-file.example)"},
		{[]string{"--profile", "cis"}, "profile cis (this control plane has none)"},
		{[]string{"--node-ip", "127.0.0.1"}, "node IP 127.0.0.1 (this control plane has " + st.NodeIP + ")"},
	} {
		code, out, errOut := runCLI(t, opts, append([]string{"up"}, tc.args...)...)
		if code != ExitRefused || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "nothing was changed") {
			t.Errorf("up %v on a node with a control plane: exit %d, want 3 naming %q\n%s\n%s", tc.args, code, tc.want, out, errOut)
		}
	}
	if now, _ := d.ReadFile(nodestate.Path); !bytes.Equal(now, saved) {
		t.Error("a refused up changed the node state")
	}
}
