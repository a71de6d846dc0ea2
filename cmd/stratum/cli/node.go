package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/interrupt"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
)

// The commands that act on this machine (host.Local): up, server, token
// create, etcd members / health, certs check, grants prune. Each binds an
// ha.Node to the host and runs the same flow (flow.go) `stratum sim up` runs
// on simulated hosts.

// certKeyMaxAge is the age past which `certs check` warns that the
// certificate-key should be rotated.
const certKeyMaxAge = 90 * 24 * time.Hour

// localNode binds an ha.Node to this machine, or to Options.Host with
// Options.Checkpoint as its checkpoint hook.
func (a *app) localNode() (*ha.Node, host.Host, error) {
	newHost := a.opts.Host
	if newHost == nil {
		newHost = func() (host.Host, error) {
			l, err := host.NewLocal()
			if err != nil {
				return nil, err
			}
			l.Services = waitedServices{Services: localServices(), progress: a.progress}
			return l, nil
		}
	}
	h, err := newHost()
	if err != nil {
		return nil, nil, err
	}
	return ha.NewNode(ha.Env{Host: h, Checkpoint: a.opts.Checkpoint, Log: a.log, Progress: a.progress}), h, nil
}

// noSupervisorHint is appended to an error caused by this host having no
// running stratum supervisor to start, stop or restart a service.
const noSupervisorHint = `No stratum supervisor runs this node's services. On a real Linux host "stratum up"
is that supervisor: it runs etcd, the kube-apiserver, the VIP and the operator as its
children and stays in the foreground (or under systemd, after "stratum install").
The files written so far stay, and "stratum up" starts from them. To try the whole
flow on simulated hosts on this machine instead, run: stratum sim up --control-planes 3`

// explainHost adds noSupervisorHint to an error that comes from a service
// this host cannot run because nothing supervises it.
func explainHost(err error) error {
	if err == nil {
		return nil
	}
	if host.NotRunHere(err) { // supervisor.ErrNotRunning among them
		return fmt.Errorf("%w\n\n%s", err, noSupervisorHint)
	}
	return err
}

// printState prints what a control plane's node state says it is.
func (a *app) printState(verb string, st *nodestate.NodeState) {
	fmt.Fprintf(a.stdout, "%s: node %s (%s), etcd member %s, server %s", verb, st.NodeName, st.NodeIP, st.Etcd.PeerURL, st.Server)
	if st.VIP.Address != "" {
		fmt.Fprintf(a.stdout, ", VIP %s", st.VIP.Address)
	}
	fmt.Fprintln(a.stdout)
}

func checkIP(flag, v string) error {
	if v != "" && net.ParseIP(v) == nil {
		return usagef("%s %q is not an IP address", flag, v)
	}
	return nil
}

// checkVIP refuses a --vip that is not an IPv4 address (ha.CheckVIP) as
// bad usage.
func checkVIP(v string) error {
	if v == "" {
		return nil
	}
	if err := ha.CheckVIP(v); err != nil {
		return usagef("--vip: %v", err)
	}
	return nil
}

// checkNodeIP refuses a --node-ip that is not one address, or v4,v6 for a
// dual-stack node, as bad usage.
func checkNodeIP(v string) error {
	if v == "" {
		return nil
	}
	if _, err := host.ParseNodeIP(v); err != nil {
		return usagef("--node-ip %q %v", v, err)
	}
	return nil
}

// checkUpNetwork refuses, as bad usage before anything is looked at, a
// --pod-cidr, --service-cidr or --cluster-domain that is no network on its
// own (netcfg.Config.CheckEach; how they fit with a --config file's and the
// defaults is the bring-up's to judge) and an unknown --profile: on a node
// with a control plane they were otherwise taken without a word, and on a
// fresh one refused only after the host's checks.
func checkUpNetwork(f upFlags) error {
	c := netcfg.Config{PodCIDR: f.podCIDR, ServiceCIDR: f.serviceCIDR, ClusterDomain: f.clusterDomain}
	if err := c.CheckEach(); err != nil {
		return usagef("%v", err)
	}
	if f.profile != "" && !slices.Contains(host.Profiles, f.profile) {
		return usagef("--profile: unknown profile %q (known: %s)", f.profile, strings.Join(host.Profiles, ", "))
	}
	return nil
}

// upFlags are `stratum up`'s flags.
type upFlags struct {
	nodeIP, vip, podCIDR, serviceCIDR, clusterDomain, profile, config string
	etcdQuota                                                         string
	// asSupervisor: be this node's supervisor or do nothing; never act
	// through one already running (the unit `stratum install` writes).
	asSupervisor bool
	superviseFlags
}

func (a *app) upCmd() *cobra.Command {
	var f upFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring up this machine's control plane: bootstrap the first one, or start a saved one",
		Long: `Bring up the control plane on this machine.

On a fresh node it bootstraps the first control plane of a new cluster: the cluster's
CAs, this node's leaf certificates and kubeconfigs, a single-member etcd, the
kube-apiserver, kube-vip holding --vip, and the cluster-info a joiner discovers the CA
from. On a node with saved control-plane state it starts what that state records
(the flags are then not used, except --vip on a control plane that has none: a single
control plane growing into HA adopts the VIP, and its apiserver certificate is reissued
to cover it before kube-vip takes it; then "stratum repoint --vip" moves its clients;
a --pod-cidr, --service-cidr, --cluster-domain, --profile or --node-ip other than the
one it was brought up with is refused, the same one passes).
Beside this node's running supervisor, "stratum up" starts through it whatever of
the control plane is not running, and exits; "stratum up --vip" adopts the VIP that
way: the apiserver restarts onto the reissued certificate and the VIP candidate
starts, while etcd and the supervisor keep running.
On a node where a join was interrupted after its etcd member-add (a surviving join
intent journal) it refuses, naming the journal and the command that recovers it; on a
node whose recorded node IP is no longer one of this host's addresses it refuses, naming
it (a control plane does not move to another address).

On a real host stratum is the node's supervisor: after the bring-up it stays in the
foreground running etcd and the kube-apiserver (from --bin-dir, checked before anything
changes) as its children, restarted with backoff if they exit and logged under
/var/log/stratum, plus the VIP (a /32 on the node's interface, announced by gratuitous
ARP, held by the winner of a Lease election) and the operator. SIGINT, SIGTERM or SIGHUP stops
them all, newest first; a second SIGINT or SIGTERM kills what still runs at once. Other stratum commands
reach it through /run/stratum/supervisor.sock; "stratum install" writes a systemd unit that
runs it at boot. It must run as root. A start refused because the etcd data is missing
where the member has served (a disk not mounted, or a dead one replaced) does not end the
supervisor: it stays up with nothing started, so the "stratum etcd rejoin" the refusal
advises runs through it, and starts the control plane once the data is back.
"stratum sim up" runs the same flow on simulated hosts.

Exits 2 on bad usage (a --node-ip that is not an IP, a --vip that is not an IPv4
address of one host, a --pod-cidr, --service-cidr or --cluster-domain that is no
network, an unknown --profile, an extra argument; nothing changed), 3 when refused before changing anything
(the reason and what to do on stderr), 1 when it failed after a change (run it again:
it resumes).`,
		Example: `  # First control plane of a new cluster, fronted by a VIP
  stratum up --node-ip 10.0.0.11 --vip 10.0.0.10

  # Start a control plane from its saved state; beside its running supervisor,
  # start through it whatever is not running
  stratum up

  # A single control plane growing into HA: adopt a VIP (through its running
  # supervisor, or as it starts), then move its clients onto it
  stratum up --vip 10.0.0.10
  stratum repoint --vip 10.0.0.10`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkNodeIP(f.nodeIP); err != nil {
				return err
			}
			if err := checkVIP(f.vip); err != nil {
				return err
			}
			if err := checkUpNetwork(f); err != nil {
				return err
			}
			quota, err := controlplane.ParseEtcdQuota(f.etcdQuota)
			if err != nil {
				return usagef("--etcd-quota: %v", err)
			}
			o := ha.BootstrapOptions{
				NodeIP: f.nodeIP, PodCIDR: f.podCIDR, ServiceCIDR: f.serviceCIDR,
				ClusterDomain: f.clusterDomain, Profile: f.profile, EtcdQuota: quota,
			}
			if f.vip != "" {
				o.VIP = nodestate.VIP{Address: f.vip}
			}
			if err := applyConfigToUp(cmd, f.config, &o); err != nil {
				return err
			}
			switch {
			case f.install && f.asSupervisor:
				return usagef("--install hands a supervisor started by hand to systemd's unit, and --as-supervisor is how the unit runs it: give one or the other")
			case f.install && a.opts.Host != nil:
				return usagef("--install is for a real host, whose systemd runs the unit")
			}
			if a.opts.Host == nil {
				err := a.supervise(cmd.Context(), "stratum up", "control plane up", f.superviseFlags, o, func(ctx context.Context, n *ha.Node) (*nodestate.NodeState, error) {
					return n.Up(ctx, o)
				})
				if errors.Is(err, supervisor.ErrAlreadyRunning) {
					if f.install {
						return refusedf("stratum up --install refused: a stratum supervisor already runs on this node: `stratum install --now` hands it to systemd's unit (where the unit does not run it already); nothing was changed")
					}
					if f.asSupervisor {
						return refusedf("%w; with --as-supervisor stratum up runs this node's supervisor or nothing (the unit `stratum install` writes runs it so, and tries again every 5 s: it takes over within 5 s of that supervisor stopping)", err)
					}
					if cmd.Flags().Changed("bin-dir") || cmd.Flags().Changed("operator") {
						fmt.Fprintln(a.stderr, "warning: --bin-dir and --operator apply when a supervisor starts; the running one keeps its own")
					}
					return a.upThroughSupervisor(cmd.Context(), o, err)
				}
				return err
			}
			n, _, err := a.localNode()
			if err != nil {
				return err
			}
			st, err := n.Up(cmd.Context(), o)
			if err != nil {
				return explainHost(err)
			}
			a.printState("control plane up", st)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.nodeIP, "node-ip", "", "this node's `IP` for etcd and the apiserver, or v4,v6 for a dual-stack node (default: the saved one, else the --config's nodeIP, else $NODE_IP, else resolved from the host's addresses)")
	fl.StringVar(&f.vip, "vip", "", "the cluster's virtual `IP` (IPv4: it is announced by ARP), held by kube-vip on one control plane; joiners and clients reach the cluster through it")
	fl.StringVar(&f.podCIDR, "pod-cidr", "", "the cluster's pod `CIDR` (default 10.244.0.0/16)")
	fl.StringVar(&f.serviceCIDR, "service-cidr", "", "the cluster's service `CIDR` (default 10.96.0.0/12)")
	fl.StringVar(&f.clusterDomain, "cluster-domain", "", "the cluster's DNS `domain` (default cluster.local)")
	fl.StringVar(&f.profile, "profile", "", "the node profile this control plane runs, by `name` (e.g. cis); none by default")
	fl.StringVar(&f.etcdQuota, "etcd-quota", "", "the etcd members' quota, the database `size` at which etcd refuses every write, as 8Gi or 512Mi (16Mi to 8Gi; default etcd's, 2Gi); joins take the cluster's, and `stratum etcd quota` changes it later")
	fl.StringVar(&f.config, "config", "", "read the network, VIP, profile, SELinux, Cilium and etcd quota settings from this YAML `FILE` (kind ControlPlaneConfig); flags override it")
	fl.BoolVar(&f.asSupervisor, "as-supervisor", false, "be this node's supervisor or do nothing: when one already runs, refuse (exit 3) instead of starting through it what is stopped (the systemd unit runs up so)")
	f.superviseFlags.add(cmd)
	return cmd
}

// upThroughSupervisor is `stratum up` on a control plane whose supervisor
// already runs (running, the error that said so): the same start, its
// services reached through the supervisor's control socket as every other
// command reaches them, so `stratum up` is what brings up whatever of the
// node is not running, wherever it runs. With --vip it adopts the VIP: it
// is recorded, the apiserver certificate reissued to cover it and the
// apiserver restarted onto it, then the supervisor's VIP candidate started;
// etcd and the supervisor itself keep running. A node without control-plane
// state (a join under way under that supervisor) is refused with running;
// one whose VIP is another, with nothing changed.
func (a *app) upThroughSupervisor(ctx context.Context, o ha.BootstrapOptions, running error) error {
	n, h, err := a.localNode()
	if err != nil {
		return err
	}
	st, err := nodestate.Load(h)
	if err != nil {
		return refusedf("stratum up refused: %w; nothing was changed (this node has no control-plane state to start through it: %v)", running, err)
	}
	verb := "control plane up"
	switch {
	case o.VIP.Address == "":
		fmt.Fprintf(a.stdout, "a stratum supervisor runs this control plane: starting what its node state records through it (%s)\n", supervisor.SocketPath)
	case o.VIP.Address == st.VIP.Address:
		fmt.Fprintf(a.stdout, "a stratum supervisor runs this control plane, whose VIP is already %s: starting what its node state records through it (%s)\n", o.VIP.Address, supervisor.SocketPath)
	default:
		verb = "VIP adopted"
		fmt.Fprintf(a.stdout, "a stratum supervisor runs this control plane: adopting the VIP %s through it (%s)\n", o.VIP.Address, supervisor.SocketPath)
	}
	// Restart, never Up: a reset that ran since the state was read leaves
	// no state, and Up would bootstrap a new cluster on the machine it just
	// emptied.
	st, err = n.Restart(ctx, o, "stratum up (starting this control plane through its supervisor)")
	if errors.Is(err, nodestate.ErrNoState) {
		return refusedf("stratum up refused: %w; nothing was changed (this node's control-plane state is gone since it was read: a reset ran meanwhile: %v)", running, err)
	}
	if err != nil {
		return explainHost(err)
	}
	a.printState(verb, st)
	if st.VIP.Address != "" && st.Server != apiServerURL(st.VIP.Address) {
		fmt.Fprintf(a.stdout, "this node's clients still target %s: move them onto the VIP with `stratum repoint --vip %s`\n", st.Server, st.VIP.Address)
	}
	return nil
}

// serverFlags are `stratum server`'s flags.
type serverFlags struct {
	server, token, caHash, certKey, nodeIP, vip string
	tokenFile, certKeyFile, config              string
	superviseFlags
}

func (a *app) serverCmd() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Join this machine to a running cluster as another control plane",
		Long: `Join this machine to a running cluster as an additional control plane, with the
join command "stratum token create --control-plane" printed on a running one.

The join checks its flags first and refuses malformed ones before touching anything.
It then trusts the cluster only through --ca-hash, downloads the shared certificates
with the bootstrap --token and decrypts them with --certificate-key, issues this node's
leaf certificates and kubeconfigs, adds this node to etcd as a learner (recording an
intent journal first), saves the node state, and starts etcd (promoting the learner
once caught up), the kube-apiserver and kube-vip.

Ctrl-C before the etcd member-add stops the join at a step boundary with nothing
added; between the member-add and the saved node state the first Ctrl-C is held until
that window closes (a second one stops at once, and re-running the same command
recovers). A refused join removes the files it created.

On a real host the joined control plane then stays in the foreground under this
process, as "stratum up" does (see its help); run as root. The token and the
certificate-key can come from files (--token-file, --certificate-key-file) or the
environment ($STRATUM_TOKEN, $STRATUM_CERTIFICATE_KEY) instead of flags, so they are
not in the process list while the control plane runs. Given as flags, they are moved
there: before it reads or changes anything, stratum server runs itself again with them in
its environment instead of its command line (still visible to every local user for those
first milliseconds, and for the life of a wrapper such as sudo, whose own command line
stratum cannot change; the file form never is).

Exits 2 on bad usage (a required flag missing, a malformed --node-ip or --vip, a
secret's flag and its file both given), 3 when refused before the etcd member-add or
by the add itself (nothing added; the files it created are removed), 1 when it failed
after the member-add, even when it rolled the member back (run the same command again:
it recovers).`,
		Example: `  # The join command printed by "stratum token create --control-plane"
  stratum server --server https://10.0.0.10:6443 --token abcdef.0123456789abcdef \
    --ca-hash sha256:<64 hex digits> --certificate-key <64 hex digits> --node-ip 10.0.0.12

  # The same, with the secrets in root-only files instead of the process list
  stratum server --server https://10.0.0.10:6443 --token-file stratum-join-token \
    --ca-hash sha256:<64 hex digits> --certificate-key-file stratum-join-certificate-key`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkNodeIP(f.nodeIP); err != nil {
				return err
			}
			if err := checkVIP(f.vip); err != nil {
				return err
			}
			// On a real host, before any file or variable is read (a
			// --config or --token-file that is a pipe reads once).
			if a.opts.Host == nil {
				if err := a.secretsOutOfArgv(&f); err != nil {
					return err
				}
			}
			tok, err := secret("--token", f.token, "--token-file", f.tokenFile, envToken)
			if err != nil {
				return err
			}
			key, err := secret("--certificate-key", f.certKey, "--certificate-key-file", f.certKeyFile, envCertKey)
			if err != nil {
				return err
			}
			// Read once: out of the environment etcd and the apiserver
			// inherit, where /proc/<pid>/environ would keep them for the
			// life of every child.
			os.Unsetenv(envToken)
			os.Unsetenv(envCertKey)
			var missing []string
			for _, r := range []struct{ name, v string }{
				{"--server", f.server}, {"--token (or --token-file, or $" + envToken + ")", tok}, {"--ca-hash", f.caHash},
				{"--certificate-key (or --certificate-key-file, or $" + envCertKey + ")", key},
			} {
				if r.v == "" {
					missing = append(missing, r.name)
				}
			}
			if len(missing) > 0 {
				return usagef("missing required flag(s) %s: copy the join command printed by `stratum token create --control-plane`", strings.Join(missing, ", "))
			}
			o := ha.JoinOptions{Server: f.server, Token: tok, CAHash: f.caHash, CertKey: key, NodeIP: f.nodeIP, Operator: f.operator}
			if f.vip != "" {
				o.VIP = nodestate.VIP{Address: f.vip}
			}
			if err := applyConfigToJoin(cmd, f.config, &o); err != nil {
				return err
			}
			// Before the supervisor's own checks (root, socket, binaries):
			// a mistyped join command is the first thing to name.
			if err := ha.CheckJoinOptions(o); err != nil {
				return refused(err)
			}
			// The join's interrupt context: a signal stops it at a step
			// boundary, and is held through the member-add window. It is
			// not under the command's own signal context, which would end
			// at the first signal regardless of that window.
			joinOnce := func(n *ha.Node) (*nodestate.NodeState, error) {
				run := interrupt.New(context.WithoutCancel(cmd.Context()), a.log)
				defer run.Stop()
				// A signal the command's context took before this run
				// listened is not lost: the join does not begin.
				if err := cmd.Context().Err(); err != nil {
					return nil, ha.Refusal(fmt.Errorf("control-plane join stopped before it began: %w; nothing was changed", context.Cause(cmd.Context())))
				}
				return join(run.Context(), n, o)
			}
			if f.install && a.opts.Host != nil {
				return usagef("--install is for a real host, whose systemd runs the unit")
			}
			if a.opts.Host == nil {
				return a.supervise(cmd.Context(), "stratum server", "joined as a control plane", f.superviseFlags, ha.BootstrapOptions{}, func(_ context.Context, n *ha.Node) (*nodestate.NodeState, error) {
					return joinOnce(n)
				})
			}
			n, _, err := a.localNode()
			if err != nil {
				return err
			}
			st, err := joinOnce(n)
			if err != nil {
				return explainHost(err)
			}
			a.printState("joined as a control plane", st)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "", "the cluster's API server `URL` (https://<VIP>:6443) (required)")
	fl.StringVar(&f.token, "token", "", "the control-plane bootstrap `token` (<id>.<secret>) (required, unless given by --token-file or $"+envToken+")")
	fl.StringVar(&f.caHash, "ca-hash", "", "the cluster CA's public-key `hash` (sha256:<hex>) (required)")
	fl.StringVar(&f.certKey, "certificate-key", "", "the `key` (64 hex digits) the shared certificates were uploaded under (required, unless given by --certificate-key-file or $"+envCertKey+")")
	fl.StringVar(&f.nodeIP, "node-ip", "", "this node's `IP`, or v4,v6 for a dual-stack node (default: the --config's nodeIP, else $NODE_IP, else resolved from the host's addresses)")
	fl.StringVar(&f.vip, "vip", "", "the cluster's virtual `IP` (IPv4) this control plane also runs kube-vip for")
	fl.StringVar(&f.tokenFile, "token-file", "", "read the bootstrap token from `FILE` (keeps it out of the process list; or set $"+envToken+")")
	fl.StringVar(&f.config, "config", "", "read the network, VIP, profile, SELinux, Cilium and etcd quota settings from this YAML `FILE` (kind ControlPlaneConfig; the network, Cilium and quota must be the cluster's); flags override it")
	fl.StringVar(&f.certKeyFile, "certificate-key-file", "", "read the certificate-key from `FILE` (keeps it out of the process list; or set $"+envCertKey+")")
	f.superviseFlags.add(cmd)
	return cmd
}

func (a *app) tokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Mint, list and revoke join tokens",
		Example: `  # A control-plane join grant valid for 2 hours
  stratum token create --control-plane

  # Revoke a token that is no longer needed
  stratum token list
  stratum token delete abcdef`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(a.tokenCreateCmd(), a.tokenListCmd(), a.tokenDeleteCmd())
	return cmd
}

func (a *app) tokenCreateCmd() *cobra.Command {
	var (
		controlPlane bool
		ttl          time.Duration
		kubeconfigTo string
		out          *output
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Mint a join token and print the join command",
		Long: `Mint a join token on this control plane and print the command to run on the joining
node. Run it on a control plane (it reads the admin kubeconfig, the cluster CA and the
node state).

With --control-plane it mints a control-plane join grant: a bootstrap token in the
control-plane group, a fresh certificate-key, and the shared certificates uploaded
under that key to an encrypted Secret owned by the token (so the grant expires with
it). Pass the printed certificate-key to the joiner out of band.

Without it, a worker token: the token, the cluster CA's hash and the server, for a
kubelet's TLS bootstrap; --bootstrap-kubeconfig-out writes the bootstrap kubeconfig
the token authorises (the kubelet's --bootstrap-kubeconfig). This build joins control
planes; it has no worker join command of its own.

-o json (or yaml) prints {id, kind, expires, token, caHash, server, certificateKey,
joinCommand, joinCommandSecretFiles, bootstrapKubeconfig}: the secrets included, so
keep that output as private as the join command.

Exits 2 for a bad --ttl (unparsable, not positive, or over 24h for a control-plane
grant) or --bootstrap-kubeconfig-out with --control-plane, 3 off a control plane, for an
unwritable --bootstrap-kubeconfig-out or when the mint is refused (a refused upload
removes its token again), 1 when it failed midway.`,
		Example: `  # A control-plane join grant valid for 2 hours
  stratum token create --control-plane

  # A worker token valid for 30 minutes, with the kubelet's bootstrap kubeconfig
  stratum token create --ttl 30m --bootstrap-kubeconfig-out bootstrap-kubelet.conf

  # For a script: the grant as JSON
  stratum token create --control-plane -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if err := checkGrantTTL(ttl, controlPlane); err != nil {
				return usagef("--%w", err)
			}
			if kubeconfigTo != "" {
				if controlPlane {
					return usagef("--bootstrap-kubeconfig-out is for a worker token; a control-plane grant's joiner builds its own")
				}
				// Refused before the mint, so no token is left behind
				// for a file that cannot be written.
				if err := checkWritableFile(kubeconfigTo); err != nil {
					return refusedf("token create refused: --bootstrap-kubeconfig-out %s: %w; no token was created", kubeconfigTo, err)
				}
			}
			n, h, err := a.localNode()
			if err != nil {
				return err
			}
			m, server, err := mintGrant(cmd.Context(), n, h, ttl, controlPlane, a.waitNotice())
			if err != nil {
				return fmt.Errorf("token create: %w", err)
			}
			if kubeconfigTo != "" {
				if err := writeFileAtomic(kubeconfigTo, m.BootstrapKubeconfig, 0o600); err != nil {
					// The minted token in the asked-for format, so a script
					// reading -o json still gets it.
					if werr := a.write(out, mintedReportOf(m, server, controlPlane), func() error { a.printMinted(m, controlPlane); return nil }); werr != nil {
						return errors.Join(werr, fmt.Errorf("token %s was minted, but writing its bootstrap kubeconfig failed: %w; delete it (`stratum token delete %s`) if unused", m.ID, err, m.ID))
					}
					return fmt.Errorf("token %s was minted, but writing its bootstrap kubeconfig failed: %w; the token above still works (its bootstrapKubeconfig in -o json)", m.ID, err)
				}
			}
			return a.write(out, mintedReportOf(m, server, controlPlane), func() error {
				a.printMinted(m, controlPlane)
				if kubeconfigTo != "" {
					fmt.Fprintf(a.stdout, "\nwrote the bootstrap kubeconfig to %s (mode 0600)\n", kubeconfigTo)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&controlPlane, "control-plane", false, "mint a control-plane join grant (token, certificate-key, uploaded shared certificates)")
	cmd.Flags().DurationVar(&ttl, "ttl", token.DefaultTTL, "how long the token authenticates (e.g. 30m, 2h; at most 24h for a --control-plane grant)")
	cmd.Flags().StringVar(&kubeconfigTo, "bootstrap-kubeconfig-out", "", "for a worker token, write the bootstrap kubeconfig it authorises to `FILE` (0600)")
	out = addOutput(cmd, "text")
	return cmd
}

// mintedReport is `token create -o json` and the MCP token_create tool's
// answer. The JSON names are stable (docs/cli.md).
type mintedReport struct {
	ID                     string    `json:"id"`
	Kind                   string    `json:"kind"` // "control-plane" or "worker"
	Expires                time.Time `json:"expires"`
	Token                  string    `json:"token"`
	CAHash                 string    `json:"caHash"`
	Server                 string    `json:"server"`
	CertificateKey         string    `json:"certificateKey,omitempty"`
	JoinCommand            string    `json:"joinCommand,omitempty"`
	JoinCommandSecretFiles string    `json:"joinCommandSecretFiles,omitempty"`
	BootstrapKubeconfig    string    `json:"bootstrapKubeconfig,omitempty"`
}

func mintedReportOf(m *token.Minted, server string, controlPlane bool) mintedReport {
	r := mintedReport{ID: m.ID, Kind: "worker", Expires: m.Expires.UTC(), Token: m.Token, CAHash: m.CAHash, Server: server,
		BootstrapKubeconfig: string(m.BootstrapKubeconfig)}
	if controlPlane {
		r.Kind, r.CertificateKey, r.JoinCommand, r.JoinCommandSecretFiles = "control-plane", m.CertKey, m.JoinCommand, m.JoinCommandSecretFiles
	}
	return r
}

func (a *app) printMinted(m *token.Minted, controlPlane bool) {
	if !controlPlane {
		server, _ := kubeconfig.Server(m.BootstrapKubeconfig)
		fmt.Fprintf(a.stdout, "worker token %s, expires %s\n\n  token:    %s\n  CA hash:  %s\n  server:   %s\n",
			m.ID, m.Expires.UTC().Format(time.RFC3339), m.Token, m.CAHash, server)
		fmt.Fprintf(a.stdout, "\nIt authorises a kubelet's TLS bootstrap against the server (--bootstrap-kubeconfig-out FILE writes its bootstrap kubeconfig).\n")
		return
	}
	fmt.Fprintf(a.stdout, "control-plane join grant %s, expires %s\n\n  %s\n", m.ID, m.Expires.UTC().Format(time.RFC3339), m.JoinCommand)
	fmt.Fprintf(a.stdout, "\nThe certificate-key decrypts the cluster's shared certificates: pass it to the joiner out of band.\n")
	fmt.Fprintf(a.stdout, "\nTo keep the token and the certificate-key out of the joiner's process list altogether (the command above moves them into its environment as it starts), run instead:\n\n")
	for _, line := range strings.Split(m.JoinCommandSecretFiles, "\n") {
		fmt.Fprintf(a.stdout, "  %s\n", line)
	}
}

func (a *app) etcdCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Inspect the cluster's etcd from this control plane; defragment it, set its quota, downgrade it, remove a member, or rejoin it after a restore",
		Example: `  stratum etcd members
  stratum etcd health
  stratum etcd defrag
  stratum etcd quota 8Gi
  stratum etcd member remove cp3
  stratum etcd rejoin --server 10.0.0.11`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	var membersOut, healthOut *output
	members := &cobra.Command{
		Use:   "members",
		Short: "List etcd members: name, peer URL, voter or learner, leader, version, health",
		Long: `List the cluster's etcd members through this control plane's own member, and ask each
member for its status: whether it is a voter or a learner, whether it is the leader,
the etcd version it runs, and whether it is healthy (answered, knows a leader, raised no
alarm). Exits 0 once the table is printed, whatever the members' health; "stratum etcd
health" is the verdict.
-o json (or yaml) prints an array of {name, peerURL, clientIP, learner, leader, version,
health}.`,
		Example: `  stratum etcd members
  stratum etcd members -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := membersOut.check(); err != nil {
				return err
			}
			n, _, st, err := a.controlPlaneNode()
			if err != nil {
				return err
			}
			rows, err := etcdMembers(cmd.Context(), n, st.Etcd.ClientURL)
			if err != nil {
				return err
			}
			return a.write(membersOut, rows, func() error { return writeMemberTable(a.stdout, rows) })
		},
	}
	membersOut = addOutput(members, "table")
	health := &cobra.Command{
		Use:   "health",
		Short: "Check that every etcd member is healthy and all agree on one leader",
		Long: `Check the cluster's etcd health from this control plane: every member (by its client
address, from the member list) must answer, know a leader and raise no alarm, and all
must name the same leader; a split brain (two partitions, each with a leader) is
reported unhealthy. Exits 1 with the reason when the cluster is not healthy. A member
whose database fills 80% of its quota or more is warned about (exit 0 for that alone):
at the quota etcd refuses every write; "stratum etcd defrag" gives back the free space.
-o json (or yaml) prints {healthy, members, error, warnings} (members: the client
addresses asked).`,
		Example: `  stratum etcd health
  stratum etcd health -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := healthOut.check(); err != nil {
				return err
			}
			n, _, st, err := a.controlPlaneNode()
			if err != nil {
				return err
			}
			rep, herr := etcdHealth(cmd.Context(), n, st)
			if err := a.write(healthOut, rep, func() error {
				if herr == nil {
					fmt.Fprintf(a.stdout, "etcd healthy: %d members (%s) answer and agree on one leader\n", len(rep.Members), strings.Join(rep.Members, ", "))
				}
				for _, w := range rep.Warnings {
					fmt.Fprintf(a.stdout, "warning: %s\n", w)
				}
				return nil
			}); err != nil {
				return err
			}
			if herr != nil {
				return fmt.Errorf("etcd is not healthy: %w", herr)
			}
			return nil
		},
	}
	healthOut = addOutput(health, "text")
	cmd.AddCommand(members, health, a.etcdDefragCmd(), a.etcdQuotaCmd(), a.etcdMemberCmd(), a.etcdDowngradeCmd())
	return cmd
}

func (a *app) certsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Inspect, rekey and re-publish the cluster's shared certificates",
		Example: `  stratum certs check
  stratum certs rekey`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	var out *output
	check := &cobra.Command{
		Use:   "check",
		Short: "Report every certificate's expiry on this node and the shared certificates' key age",
		Long: fmt.Sprintf(`Report every certificate on this control plane: each CA and leaf under %s and each
kubeconfig's client certificate, with its expiry and the days left (a warning under
30 days). Then, through the admin kubeconfig, say when the shared certificates'
certificate-key was last set, with a warning when it is older than %d days (rotate it
with "stratum certs rekey"). Exits 1 when a certificate has expired, is not valid yet
(this machine's clock is behind the one that issued it: set the time), or the key's age
cannot be read. -o json (or yaml) prints {certificates: [{name, kind, subject,
notBefore, notAfter, daysLeft, expired, notYetValid}], certificateKeySetAt,
certificateKeyError, problems}: daysLeft is rounded down (negative once expired), and
problems are what it exits 1 for.`, version.PKIDir, int(certKeyMaxAge.Hours()/24)),
		Example: `  stratum certs check
  stratum certs check -o json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			n, h, err := a.localNode()
			if err != nil {
				return err
			}
			return a.certsCheck(cmd.Context(), n, h, out)
		},
	}
	out = addOutput(check, "table")
	cmd.AddCommand(check, a.certsRenewCmd(), a.certsRekeyCmd(), a.certsReuploadCmd())
	return cmd
}

func (a *app) grantsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "grants",
		Short: "List and prune control-plane join grants",
		Example: `  stratum grants list
  stratum grants prune`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove expired join grants from the shared-certificate Secret",
		Long: `Remove the entries of expired or deleted bootstrap tokens from the cluster's encrypted
shared-certificate Secret, through this control plane's admin kubeconfig. Live grants
are kept. It prints the tokens whose entries it dropped; nothing to prune is success
(exit 0). Exits 3 off a control plane, 1 when the Secret could not be read or written
(run it again).`,
		Example: `  stratum grants prune`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, _, cs, err := a.adminNode()
			if err != nil {
				return err
			}
			dropped, err := n.PruneGrants(cmd.Context(), cs)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, prunedLine(dropped))
			return nil
		},
	}
	cmd.AddCommand(a.grantsListCmd(), prune)
	return cmd
}

// grantsListCmd is `stratum grants list`: the grant entries of the
// shared-certificate Secret, each with its token's state.
func (a *app) grantsListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the control-plane join grants in the shared-certificate Secret, with their tokens' state",
		Long: `List the grant entries of the cluster's encrypted shared-certificate Secret (one per
control-plane join grant minted with "stratum token create --control-plane"), through
this control plane's admin kubeconfig: each grant's token ID, whether its bootstrap
token still exists and authenticates (a grant that is not live is what "stratum grants
prune" drops), when the token expires, and the entry's size against the Secret's budget.
-o json (or yaml) prints {published, grants: [{tokenID, bytes, tokenExists, expires,
live}], generation, bytes, budgetBytes}.`,
		Example: `  stratum grants list
  stratum grants list -o json`,
		Args: usageArgs(cobra.NoArgs),
	}
	cmd.RunE = adminReport(a, addOutput(cmd, "table"), func(ctx context.Context, h host.Host, cs kubernetes.Interface) (ha.GrantsReport, error) {
		rep, err := ha.ListGrants(ctx, cs, h.Now())
		if err != nil {
			return rep, fmt.Errorf("grants list: %w", err)
		}
		return rep, nil
	}, writeGrantsTable)
	return cmd
}

// writeGrantsTable is `grants list`'s human form.
func writeGrantsTable(w io.Writer, rep ha.GrantsReport) error {
	if !rep.Published {
		_, err := fmt.Fprintln(w, "no shared certificates are published: `stratum token create --control-plane` uploads them")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOKEN\tLIVE\tEXPIRES\tBYTES")
	for _, g := range rep.Grants {
		live, exp := "yes", "never"
		switch {
		case !g.TokenExists:
			live, exp = "no (token gone)", "-"
		case !g.Live:
			live = "no"
		}
		if g.Expires != nil {
			exp = g.Expires.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", g.TokenID, live, exp, g.Bytes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d grants; the Secret holds %d of %d bytes (generation %d)\n", len(rep.Grants), rep.Bytes, rep.BudgetBytes, rep.Generation)
	return err
}

// prunedLine says what a prune dropped: the tokens whose grant entries its
// write removed, or that there was nothing to prune.
func prunedLine(dropped []string) string {
	if len(dropped) == 0 {
		return "no grant to prune: every grant entry left is a live token's"
	}
	return "dropped the grant entries of expired or deleted tokens: " + strings.Join(dropped, ", ")
}
