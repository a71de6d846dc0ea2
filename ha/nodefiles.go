package ha

import (
	"fmt"

	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// kubeletConfigPath is the kubelet config the assembly writes.
const kubeletConfigPath = version.K8sConfDir + "/kubelet-config.yaml"

// writeRuntimeConfigs renders the kubelet's configuration from the node
// state: the cluster DNS (the tenth service address, as kubeadm), the
// cluster domain, and the node's address. The simulator runs no kubelet; a
// real host's supervisor starts it with this file.
func writeRuntimeConfigs(h host.Files, st *nodestate.NodeState) error {
	if st == nil {
		return fmt.Errorf("runtime configs: no node state to render")
	}
	dns, err := netcfg.Config{ServiceCIDR: st.ServiceCIDR}.ClusterDNSIP()
	if err != nil {
		return err
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
clusterDNS:
- %s
clusterDomain: %s
address: %s
rotateCertificates: true
`, version.PKIFile("ca.crt"), dns, st.ClusterDomain, st.NodeIP)
	if err := h.WriteFile(kubeletConfigPath, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", kubeletConfigPath, err)
	}
	return nil
}

// writeProfileConfigs writes the files a node profile's apiserver flags
// reference. The cis profile's is an audit policy that records metadata for
// every request and leaves out the noisiest read-only traffic.
func writeProfileConfigs(h host.Files, profile string) error {
	switch profile {
	case "":
		return nil
	case "cis":
		policy := `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "configmaps"]
- level: Metadata
`
		if err := h.WriteFile(controlplane.AuditPolicyPath, []byte(policy), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", controlplane.AuditPolicyPath, err)
		}
		return nil
	}
	return fmt.Errorf("profile %q has no config files stratum knows; nothing was written", profile)
}
