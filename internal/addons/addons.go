// Package addons describes the cluster add-ons whose settings every control
// plane must share. A joining control plane receives the cluster's settings
// with the shared certificates and refuses a join whose own differ.
package addons

// CiliumSettings are the cluster's Cilium settings: a control plane that ran
// different ones would render a different CNI configuration than its peers.
// The type is comparable; two settings agree exactly when they are ==.
type CiliumSettings struct {
	// Enabled reports that the cluster runs Cilium as its CNI.
	Enabled bool `json:"enabled"`
	// KubeProxyReplacement reports that Cilium replaces kube-proxy.
	KubeProxyReplacement bool `json:"kubeProxyReplacement"`
	// Version is the Cilium release the cluster runs ("" for the default).
	Version string `json:"version,omitempty"`
}

// Equal reports whether s and o are the same settings.
func (s CiliumSettings) Equal(o CiliumSettings) bool { return s == o }
