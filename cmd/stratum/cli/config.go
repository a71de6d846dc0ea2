package cli

import (
	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/config"
	"stratum.dev/stratum/internal/nodestate"
)

// loadConfig reads --config, or returns nil when it is not given. A file
// that does not parse is refused before anything changes.
func loadConfig(path string) (*config.Spec, error) {
	if path == "" {
		return nil, nil
	}
	f, err := config.Load(path)
	if err != nil {
		return nil, refusedf("--config: %w; nothing was changed", err)
	}
	return &f.Spec, nil
}

// unlessFlag sets *dst to v when v is set and the flag was not given on the
// command line: flags override the file.
func unlessFlag(cmd *cobra.Command, flag string, dst *string, v string) {
	if v != "" && !cmd.Flags().Changed(flag) {
		*dst = v
	}
}

// applyConfigToUp fills a bring-up's options from --config where no flag set
// them. spec.network.nodeIP stays apart from --node-ip (ConfigNodeIP), so the
// node-IP precedence is ha's: flag, saved, config, $NODE_IP, detection.
func applyConfigToUp(cmd *cobra.Command, path string, o *ha.BootstrapOptions) error {
	s, err := loadConfig(path)
	if s == nil {
		return err
	}
	o.ConfigNodeIP = s.Network.NodeIP
	unlessFlag(cmd, "pod-cidr", &o.PodCIDR, s.Network.PodCIDR)
	unlessFlag(cmd, "service-cidr", &o.ServiceCIDR, s.Network.ServiceCIDR)
	unlessFlag(cmd, "cluster-domain", &o.ClusterDomain, s.Network.ClusterDomain)
	unlessFlag(cmd, "profile", &o.Profile, s.Profile)
	if s.VIP != "" && !cmd.Flags().Changed("vip") {
		o.VIP = nodestate.VIP{Address: s.VIP}
	}
	if s.Network.Cilium != nil {
		o.Cilium = *s.Network.Cilium
	}
	o.SELinuxOptOut = s.SELinuxOptOut()
	if !cmd.Flags().Changed("etcd-quota") {
		o.EtcdQuota = s.EtcdQuotaBytes()
	}
	return nil
}

// applyConfigToJoin fills a join's options from --config where no flag set
// them. The cluster's network, domain and Cilium settings ride in with the
// shared certificates; the file's values are compared with them and a
// difference refuses the join.
func applyConfigToJoin(cmd *cobra.Command, path string, o *ha.JoinOptions) error {
	s, err := loadConfig(path)
	if s == nil {
		return err
	}
	o.ConfigNodeIP = s.Network.NodeIP
	o.PodCIDR, o.ServiceCIDR, o.ClusterDomain = s.Network.PodCIDR, s.Network.ServiceCIDR, s.Network.ClusterDomain
	o.Profile = s.Profile
	if s.VIP != "" && !cmd.Flags().Changed("vip") {
		o.VIP = nodestate.VIP{Address: s.VIP}
	}
	if s.Network.Cilium != nil {
		o.Cilium = *s.Network.Cilium
	}
	o.SELinuxOptOut = s.SELinuxOptOut()
	o.EtcdQuota = s.EtcdQuotaBytes()
	return nil
}
