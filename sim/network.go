package sim

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
)

// network is the simulation's connectivity: which hosts are isolated and which
// pairs are cut. Raft traffic between cut members is paused in both members'
// transports (EtcdServer.CutPeer); dials through a host's Handle are refused.
type network struct {
	c *Cluster

	mu       sync.Mutex
	isolated map[string]bool
	cut      map[[2]string]bool
}

func pairOf(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// severed reports whether traffic between hosts a and b is blocked.
func (n *network) severed(a, b string) bool {
	if a == b {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.isolated[a] || n.isolated[b] || n.cut[pairOf(a, b)]
}

func (n *network) allowDial(from *Host, address string) error {
	hostPart, _, err := net.SplitHostPort(address)
	if err != nil {
		hostPart = address
	}
	n.mu.Lock()
	self := n.isolated[from.name]
	n.mu.Unlock()
	if self {
		return fmt.Errorf("dial %s from %s: %w (%s is isolated)", address, from.name, ErrIsolated, from.name)
	}
	ip, err := netip.ParseAddr(hostPart)
	if err != nil {
		return nil // a name, not one of ours
	}
	to := n.c.hostByIP(ip)
	if to == nil {
		return nil
	}
	if n.severed(from.name, to.name) {
		return fmt.Errorf("dial %s from %s: %w (%s and %s are partitioned)", address, from.name, ErrIsolated, from.name, to.name)
	}
	return nil
}

// Partition splits the cluster into the given groups of host names: every pair
// of hosts in different groups is cut. Hosts named in no group form one more
// group together. Earlier cuts are replaced.
func (c *Cluster) Partition(groups ...[]string) {
	side := map[string]int{}
	for i, g := range groups {
		for _, name := range g {
			side[name] = i + 1
		}
	}
	c.network.mu.Lock()
	c.network.cut = map[[2]string]bool{}
	for _, a := range c.hosts {
		for _, b := range c.hosts {
			if a.name < b.name && side[a.name] != side[b.name] {
				c.network.cut[pairOf(a.name, b.name)] = true
			}
		}
	}
	c.network.mu.Unlock()
	var desc []string
	for _, g := range groups {
		desc = append(desc, "{"+strings.Join(g, ",")+"}")
	}
	c.events.Record("", "fault", "partition %s", strings.Join(desc, " | "))
	c.applyNetwork()
}

// Cut blocks traffic between hosts a and b, in both directions.
func (c *Cluster) Cut(a, b string) {
	c.network.mu.Lock()
	c.network.cut[pairOf(a, b)] = true
	c.network.mu.Unlock()
	c.events.Record("", "fault", "cut %s <-> %s", a, b)
	c.applyNetwork()
}

// Isolate cuts a host off from every other: its etcd member hears no peer, its
// dials are refused, and no other host's dials reach it.
func (c *Cluster) Isolate(name string) {
	c.network.mu.Lock()
	c.network.isolated[name] = true
	c.network.mu.Unlock()
	c.events.Record(name, "fault", "isolated")
	c.applyNetwork()
}

// Heal removes every cut and isolation.
func (c *Cluster) Heal() {
	c.network.mu.Lock()
	c.network.isolated = map[string]bool{}
	c.network.cut = map[[2]string]bool{}
	c.network.mu.Unlock()
	c.events.Record("", "heal", "network healed")
	c.applyNetwork()
}

// Severed lists the blocked pairs and isolated hosts, for the event log and tests.
func (c *Cluster) Severed() (pairs [][2]string, isolated []string) {
	c.network.mu.Lock()
	defer c.network.mu.Unlock()
	for p := range c.network.cut {
		pairs = append(pairs, p)
	}
	for h := range c.network.isolated {
		isolated = append(isolated, h)
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i][0]+pairs[i][1] < pairs[j][0]+pairs[j][1] })
	sort.Strings(isolated)
	return pairs, isolated
}

// applyNetwork makes every running embedded member's transport match the
// desired cuts: paused toward each member it is severed from, resumed toward
// the rest. Membership changes add peers to a transport unpaused, so this runs
// after every etcd start and on a short tick as well.
func (c *Cluster) applyNetwork() {
	for _, a := range c.hosts {
		m := a.embedded()
		if m == nil {
			continue
		}
		for _, peer := range m.peers() {
			b := c.hostByPeerURL(peer.peerURL)
			if b == nil || b == a {
				continue
			}
			m.setPeerCut(peer.id, c.network.severed(a.name, b.name))
		}
	}
}

func (c *Cluster) hostByIP(ip netip.Addr) *Host {
	for _, h := range c.hosts {
		if h.ip == ip {
			return h
		}
	}
	return nil
}

func (c *Cluster) hostByPeerURL(u string) *Host {
	for _, h := range c.hosts {
		if strings.TrimSuffix(u, "/") == h.PeerURL() {
			return h
		}
	}
	return nil
}
