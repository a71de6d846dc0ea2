package ha

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"stratum.dev/stratum/internal/version"
)

// ErrEtcdVersionSkew matches a join refused because the etcd this node runs
// cannot become a member of the cluster at its version: etcd would refuse
// to start it ("incompatible with current running cluster") after the
// member-add, leaving an unstarted learner that blocks every later join.
var ErrEtcdVersionSkew = errors.New("this node's etcd cannot join the cluster's etcd version")

// etcdVersions is a member's answer on its client port's /version: its own
// server version and the cluster version its cluster decided.
type etcdVersions struct {
	Server  string `json:"etcdserver"`
	Cluster string `json:"etcdcluster"`
}

// localEtcdVersion is the etcd version this node's etcd service runs (or
// runs when started): its service manager's word, or the version this
// stratum pins, which a real host's binary is checked to be.
func (n *Node) localEtcdVersion(ctx context.Context) string {
	st, err := n.env.Host.ServiceStatus(ctx, ServiceEtcd)
	if err == nil && st.Version != "" {
		return st.Version
	}
	return version.Etcd
}

// etcdVersionsAt reads the member at cpIP's /version with this node's etcd
// client certificate, through the host's dialer.
func (n *Node) etcdVersionsAt(ctx context.Context, cpIP string) (etcdVersions, error) {
	tlsCfg, err := n.etcdTLS()
	if err != nil {
		return etcdVersions{}, err
	}
	tr := &http.Transport{TLSClientConfig: tlsCfg, DialContext: n.env.Host.DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, EtcdEndpoint(cpIP)+"/version", nil)
	if err != nil {
		return etcdVersions{}, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return etcdVersions{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return etcdVersions{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return etcdVersions{}, fmt.Errorf("GET %s/version: %s", EtcdEndpoint(cpIP), resp.Status)
	}
	var v etcdVersions
	if err := json.Unmarshal(body, &v); err != nil {
		return etcdVersions{}, fmt.Errorf("GET %s/version: %w", EtcdEndpoint(cpIP), err)
	}
	return v, nil
}

// versionRefusal is what a version refusal says was not changed and what to
// run once the cause is fixed: a join's and a rejoin's differ.
type versionRefusal struct {
	unchanged, then string
	// wouldFail is what etcd would do with the member (joinWouldFail when
	// empty).
	wouldFail string
}

// joinWouldFail is what a member added at a version etcd refuses meets.
const joinWouldFail = "etcd would refuse to start this member after its add, leaving a learner that blocks every later join"

// upgradeVersionRefusal is `stratum upgrade node`'s (EtcdVersionFits).
var upgradeVersionRefusal = versionRefusal{unchanged: "nothing was changed", then: "run the upgrade again",
	wouldFail: "etcd would refuse to start this member on it, leaving this control plane down"}

// joinVersionRefusal is the join's: its refusals come before the member-add.
var joinVersionRefusal = versionRefusal{unchanged: "nothing was added to etcd", then: joinHint}

// memberVersions is one member's word on versions: its server version (its
// status) and the cluster version its cluster decided (its /version).
type memberVersions struct {
	ip, server, cluster string
}

// checkEtcdVersionFits refuses, before a member-add or a new member's first
// start, an etcd that etcd would not start as a member of the cluster at
// etcdIPs: the cluster's version (clusterVersionAhead) is newer than this
// node's etcd, or a downgrade is under way (etcd then admits only members of
// the version being left, and a downgrade is finished before the cluster
// grows). Members that do not answer are passed over; a cluster none of
// whose members answers is refused as unhealthy.
func (n *Node) checkEtcdVersionFits(ctx context.Context, etcdIPs []string, r versionRefusal) error {
	return n.etcdVersionFits(ctx, etcdIPs, n.localEtcdVersion(ctx), r)
}

// EtcdVersionFits refuses, as checkEtcdVersionFits refuses a joiner's, an
// etcd of version etcdVersion for this node's member among the members at
// etcdIPs: etcd would not start it (the cluster's version newer, or a
// downgrade under way). `stratum upgrade node` checks a release's etcd with
// it before it restarts the member on that etcd. Nil when it fits.
func (n *Node) EtcdVersionFits(ctx context.Context, etcdIPs []string, etcdVersion string) error {
	return n.etcdVersionFits(ctx, etcdIPs, etcdVersion, upgradeVersionRefusal)
}

func (n *Node) etcdVersionFits(ctx context.Context, etcdIPs []string, local string, r versionRefusal) error {
	var errs []error
	var answers []memberVersions
	for _, ip := range etcdIPs {
		st, err := n.EtcdStorageAt(ctx, ip)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Downgrading {
			return fmt.Errorf("%w: an etcd downgrade to %s is under way (member %s), and etcd admits no new member of another version meanwhile; %s: let the downgrade finish (`stratum etcd downgrade %s` waits for it), then %s",
				ErrEtcdVersionSkew, st.DowngradeTarget, ip, r.unchanged, versionMajorMinor(st.DowngradeTarget), r.then)
		}
		v, err := n.etcdVersionsAt(ctx, ip)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		answers = append(answers, memberVersions{ip: ip, server: v.Server, cluster: v.Cluster})
	}
	if len(answers) == 0 {
		return fmt.Errorf("%w: no member told its cluster's version (%w); %s: %s", ErrClusterUnhealthy, errors.Join(errs...), r.unchanged, r.then)
	}
	cluster, at := clusterVersionAhead(answers)
	return checkEtcdVersionSkew(local, cluster, at, r)
}

// clusterVersionAhead is the version the cluster is at or is about to be
// raised to, and the member that shows it: the newer of the cluster version
// its members decided and the lowest server version among them. etcd raises
// its cluster version to its members' lowest server version within seconds
// (a snapshot restored by a newer etcd starts at the snapshot's version and
// is raised soon after), and a new member that started below it would be
// stopped then; one that started at the cluster's version keeps it there.
func clusterVersionAhead(answers []memberVersions) (ahead, at string) {
	for _, a := range answers {
		if _, _, ok := version.MajorMinor(a.server); ok && (ahead == "" || newerMinor(ahead, a.server)) {
			ahead, at = a.server, a.ip
		}
	}
	for _, a := range answers {
		if newerMinor(a.cluster, ahead) {
			ahead, at = a.cluster, a.ip
		}
	}
	return ahead, at
}

// newerMinor reports whether etcd version a's major.minor is above b's. An
// a that does not parse is never newer; a b that does not parse is below any
// a that does.
func newerMinor(a, b string) bool {
	amaj, amin, aok := version.MajorMinor(a)
	bmaj, bmin, bok := version.MajorMinor(b)
	return aok && (!bok || amaj > bmaj || amaj == bmaj && amin > bmin)
}

// checkEtcdVersionSkew is etcd's own rule for a member joining a cluster
// (its allowedVersionRange without a downgrade): the cluster's version,
// major.minor, may not be newer than the member's. A cluster whose version
// is not known is not judged.
func checkEtcdVersionSkew(local, cluster, at string, r versionRefusal) error {
	if _, _, ok := version.MajorMinor(local); !ok || !newerMinor(cluster, local) {
		return nil
	}
	cv := versionMajorMinor(cluster)
	return fmt.Errorf("%w: this node runs etcd %s and the cluster (member %s) is at etcd %s; %s; %s: install the etcd the cluster runs (the stratum release that pins etcd %s), then %s",
		ErrEtcdVersionSkew, strings.TrimPrefix(local, "v"), at, cv, cmp.Or(r.wouldFail, joinWouldFail), r.unchanged, cv, r.then)
}
