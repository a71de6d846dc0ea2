// Package config is stratum's configuration file (`--config`): a versioned
// YAML document, like kubeadm's and k0s's, holding what `stratum up` and
// `stratum server` would otherwise take as flags: the cluster network, the
// VIP, the node profile, the SELinux opt-out, the Cilium settings and the
// etcd quota. Flags
// override it. Its keys are the ones the ha code's errors name
// (spec.network.nodeIP, spec.selinux, ...), so an error points at a line of
// the file.
//
// A file is read strictly: an unknown or duplicate key, a second document, a
// wrong apiVersion or kind, or a value that does not parse is an error naming
// the key, before anything on the node changes.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"

	goyaml "go.yaml.in/yaml/v2"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/netcfg"
)

// The document's version and kind.
const (
	APIVersion = "stratum.dev/v1alpha1"
	Kind       = "ControlPlaneConfig"
)

// File is the configuration file.
type File struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       Spec   `json:"spec"`
}

// Spec is what the file sets. Every field is optional.
type Spec struct {
	Network Network `json:"network,omitempty"`
	// VIP is spec.vip, the cluster's virtual IP.
	VIP string `json:"vip,omitempty"`
	// Profile is spec.profile, the node profile by name (e.g. cis).
	Profile string `json:"profile,omitempty"`
	// SELinux is spec.selinux; false opts out (refused by the cis profile).
	SELinux *bool `json:"selinux,omitempty"`
	// Etcd is spec.etcd.
	Etcd Etcd `json:"etcd,omitempty"`
}

// Etcd is spec.etcd.
type Etcd struct {
	// Quota is spec.etcd.quota, the etcd members' quota as a quantity
	// ("8Gi"): the database size at which etcd refuses every write. Unset
	// is etcd's default, 2 GiB.
	Quota string `json:"quota,omitempty"`
}

// EtcdQuotaBytes is spec.etcd.quota in bytes, 0 when unset (Parse has
// checked it).
func (s Spec) EtcdQuotaBytes() int64 {
	q, _ := controlplane.ParseEtcdQuota(s.Etcd.Quota)
	return q
}

// Network is spec.network.
type Network struct {
	NodeIP        string                 `json:"nodeIP,omitempty"`
	PodCIDR       string                 `json:"podCIDR,omitempty"`
	ServiceCIDR   string                 `json:"serviceCIDR,omitempty"`
	ClusterDomain string                 `json:"clusterDomain,omitempty"`
	Cilium        *addons.CiliumSettings `json:"cilium,omitempty"`
}

// ErrInvalid matches every error of Load and Parse.
var ErrInvalid = errors.New("invalid configuration file")

// Load reads and checks the file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Parse decodes one document strictly (unknown and duplicate keys, and a
// second document, are errors) and checks every value, naming the key of
// each problem.
func Parse(data []byte) (*File, error) {
	var f File
	n, err := documents(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if n > 1 {
		return nil, fmt.Errorf("%w: %d documents; stratum reads one", ErrInvalid, n)
	}
	// YAMLToJSON would keep the last of duplicate keys, which the JSON
	// decoder below would then never see.
	js, err := yaml.YAMLToJSONStrict(data)
	if te := (*goyaml.TypeError)(nil); errors.As(err, &te) {
		msg := strings.Join(te.Errors, "; ")
		if bytes.Contains(data, []byte("<<")) && strings.Contains(msg, "already set") {
			msg += " (a key a YAML merge `<<` brings in cannot be set again beside it: write each key once)"
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalid, msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// Case-sensitive and strict, as Kubernetes reads its own objects:
	// encoding/json alone would take "podCidr" for podCIDR.
	strict, err := kjson.UnmarshalStrict(js, &f, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrInvalid)
	}
	var problems []string
	if f.APIVersion != APIVersion {
		problems = append(problems, fmt.Sprintf("apiVersion %q: want %s", f.APIVersion, APIVersion))
	}
	if f.Kind != Kind {
		problems = append(problems, fmt.Sprintf("kind %q: want %s", f.Kind, Kind))
	}
	s := f.Spec
	if s.Network.NodeIP != "" {
		for _, ip := range strings.Split(s.Network.NodeIP, ",") {
			if _, err := netip.ParseAddr(strings.TrimSpace(ip)); err != nil {
				problems = append(problems, fmt.Sprintf("spec.network.nodeIP %q: not an IP address (or v4,v6)", s.Network.NodeIP))
				break
			}
		}
	}
	for key, v := range map[string]string{"spec.network.podCIDR": s.Network.PodCIDR, "spec.network.serviceCIDR": s.Network.ServiceCIDR} {
		for _, c := range strings.Split(v, ",") {
			if v == "" {
				break
			}
			if _, err := netip.ParsePrefix(strings.TrimSpace(c)); err != nil {
				problems = append(problems, fmt.Sprintf("%s %q: not a CIDR (or v4,v6)", key, v))
				break
			}
		}
	}
	if d := s.Network.ClusterDomain; d != "" {
		if err := netcfg.CheckClusterDomain(d); err != nil {
			problems = append(problems, fmt.Sprintf("spec.network.clusterDomain: %v", err))
		}
	}
	if s.VIP != "" {
		vip, err := netip.ParseAddr(s.VIP)
		if err != nil {
			problems = append(problems, fmt.Sprintf("spec.vip %q: not an IP address", s.VIP))
		} else if !vip.Is4() {
			problems = append(problems, fmt.Sprintf("spec.vip %s: not an IPv4 address (the VIP is announced by ARP, which is IPv4 only)", s.VIP))
		} else if s.Network.NodeIP != "" && strings.Contains(","+s.Network.NodeIP+",", ","+vip.String()+",") {
			problems = append(problems, fmt.Sprintf("spec.vip %s is spec.network.nodeIP: the VIP must be an unused address", s.VIP))
		}
	}
	if _, err := controlplane.ParseEtcdQuota(s.Etcd.Quota); err != nil {
		problems = append(problems, fmt.Sprintf("spec.etcd.quota: %v", err))
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return &f, nil
}

// documents counts the YAML documents in data up to the last one that is
// neither empty nor null, so a trailing "---" with nothing after is not one.
// It uses the parser of sigs.k8s.io/yaml, which reads only the first.
func documents(data []byte) (int, error) {
	d := goyaml.NewDecoder(bytes.NewReader(data))
	n := 0
	for i := 1; ; i++ {
		var v any
		err := d.Decode(&v)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return 0, err
		}
		if v != nil {
			n = i
		}
	}
}

// SELinuxOptOut reports whether the file opts out of SELinux (spec.selinux:
// false).
func (s Spec) SELinuxOptOut() bool { return s.SELinux != nil && !*s.SELinux }
