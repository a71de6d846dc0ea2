package ha

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"

	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// apiServerCoversVIP fails unless this node's apiserver serving certificate
// names the node state's VIP and matches its key.
func (n *Node) apiServerCoversVIP(st *nodestate.NodeState) error {
	h := n.env.Host
	vip := net.ParseIP(st.VIP.Address)
	if vip == nil {
		return fmt.Errorf("the node state's VIP %q is not an IP address", st.VIP.Address)
	}
	crt, err := h.ReadFile(version.PKIFile(pki.APIServerLeaf + ".crt"))
	if err != nil {
		return fmt.Errorf("read the apiserver certificate: %w", err)
	}
	key, err := h.ReadFile(version.PKIFile(pki.APIServerLeaf + ".key"))
	if err != nil {
		return fmt.Errorf("read the apiserver key: %w", err)
	}
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		return fmt.Errorf("%w: %v", errAPIServerPair, err)
	}
	return pki.CheckLeafCovers(crt, vip)
}

// ensureAPIServerCoversVIP reissues this node's apiserver serving pair from
// the cluster CA when the node state names a VIP the certificate does not
// cover (a node that joined before the VIP was known, or a single control
// plane growing into HA), and reports whether it did. The key is written
// before the certificate: a crash between the two leaves a certificate that
// does not pair with its key, which the next start reissues again, never a
// covering certificate over a stale key.
func (n *Node) ensureAPIServerCoversVIP(st *nodestate.NodeState) (bool, error) {
	if st.VIP.Address == "" {
		return false, nil
	}
	why := n.apiServerCoversVIP(st)
	if why == nil {
		return false, nil
	}
	if !errors.Is(why, pki.ErrIPNotCovered) && !errors.Is(why, fs.ErrNotExist) && !errors.Is(why, errAPIServerPair) {
		return false, why
	}
	if err := n.reissueAPIServerLeaf(st); err != nil {
		return false, fmt.Errorf("the apiserver certificate does not serve the VIP %s (%v), and reissuing it failed: %w; nothing was started", st.VIP.Address, why, err)
	}
	n.log.Info("apiserver certificate reissued to cover the VIP", "vip", st.VIP.Address, "was", why.Error())
	return true, nil
}

// errAPIServerPair: the apiserver certificate and key on disk do not pair.
var errAPIServerPair = errors.New("the apiserver certificate and key do not pair")

// reissueAPIServerLeaf writes a fresh apiserver serving pair for st's node
// IP, VIP and service network, from the cluster CA on this node.
func (n *Node) reissueAPIServerLeaf(st *nodestate.NodeState) error {
	h := n.env.Host
	ca, err := n.clusterCA()
	if err != nil {
		return err
	}
	netc := netcfg.Config{PodCIDR: st.PodCIDR, ServiceCIDR: st.ServiceCIDR, ClusterDomain: st.ClusterDomain}.WithDefaults()
	sans, err := apiSANs(st.VIP.Address, netc)
	if err != nil {
		return err
	}
	ip := net.ParseIP(st.NodeIP)
	crt, key, err := pki.APIServerLeafFor(ca, cmp.Or(st.NodeName, h.Name()), ip, sans, h.Now()) // the node's recorded name, as at its bring-up
	if err != nil {
		return err
	}
	if err := h.WriteFile(version.PKIFile(pki.APIServerLeaf+".key"), key, 0o600); err != nil {
		return err
	}
	return h.WriteFile(version.PKIFile(pki.APIServerLeaf+".crt"), crt, 0o644)
}
