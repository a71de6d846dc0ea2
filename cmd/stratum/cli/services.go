package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/nodestate"
)

// unitName is the systemd unit `stratum install` writes.
const unitName = "stratum.service"

// systemdUnit is the unit that runs `stratum up` (the node's supervisor) at
// boot. It starts only on a node with saved state, so a machine meant to
// join a cluster never bootstraps a new one because it booted first.
func systemdUnit(stratumPath, binDir string) string {
	return fmt.Sprintf(`# Written by "stratum install". stratum up is this node's control-plane supervisor:
# it runs etcd, kube-apiserver, the VIP and the operator as its children.
[Unit]
Description=stratum control plane (etcd, kube-apiserver, VIP, operator)
After=network-online.target
Wants=network-online.target
ConditionPathExists=%s

[Service]
Type=simple
ExecStart=%s up --bin-dir %s
Restart=always
RestartSec=5
KillMode=mixed
TimeoutStopSec=60
LimitNOFILE=1048576

[Install]
WantedBy=multi-user.target
`, nodestate.Path, stratumPath, binDir)
}

func (a *app) installCmd() *cobra.Command {
	var unitDir, binDir string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Write the systemd unit that runs this node's control plane (stratum up) at boot",
		Long: `Write a systemd unit, stratum.service, whose ExecStart is "stratum up": the node's
supervisor, which runs etcd, the kube-apiserver, the VIP and the operator as its
children. The unit starts only on a node with saved state (` + nodestate.Path + `), so
bring the node up or join it by hand first, stop that foreground run, then enable the
unit. Nothing requires systemd: without it, run "stratum up" under any supervisor.`,
		Example: `  # After "stratum up ..." or "stratum server ..." once by hand (then Ctrl-C):
  stratum install
  systemctl daemon-reload && systemctl enable --now stratum

  # Print the unit instead of writing it
  stratum install --dry-run`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find this stratum binary: %w", err)
			}
			if self, err = filepath.Abs(self); err != nil {
				return err
			}
			unit := systemdUnit(self, binDir)
			if dryRun {
				fmt.Fprint(a.stdout, unit)
				return nil
			}
			path := filepath.Join(unitDir, unitName)
			if err := os.MkdirAll(unitDir, 0o755); err != nil {
				return fmt.Errorf("install: %w; nothing was written", err)
			}
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(unit), 0o644); err != nil {
				return fmt.Errorf("install: write %s: %w; nothing was written", path, err)
			}
			if err := os.Rename(tmp, path); err != nil {
				os.Remove(tmp)
				return fmt.Errorf("install: %w; nothing was written", err)
			}
			fmt.Fprintf(a.stdout, "wrote %s (runs %s up --bin-dir %s)\n", path, self, binDir)
			if _, err := os.Stat("/run/systemd/system"); err != nil {
				fmt.Fprintln(a.stdout, "systemd is not running on this machine: the unit is written for when it does; meanwhile run `stratum up` under your own supervisor")
				return nil
			}
			fmt.Fprintln(a.stdout, strings.TrimSpace(`
enable it with: systemctl daemon-reload && systemctl enable --now stratum
(it starts only once this node has saved state: bring it up or join it by hand first)`))
			return nil
		},
	}
	cmd.Flags().StringVar(&unitDir, "unit-dir", "/etc/systemd/system", "the `directory` the unit is written to")
	cmd.Flags().StringVar(&binDir, "bin-dir", controlplane.DefaultBinDir, "the `directory` of the control-plane binaries the unit's stratum up uses")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the unit, write nothing")
	return cmd
}

// supervisedServices are the services `stratum status` reports, in start order.
var supervisedServices = []string{ha.ServiceEtcd, ha.ServiceAPIServer, ha.ServiceVIP, serviceOperator}

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the services this node's stratum supervisor runs",
		Long: `Ask this node's running stratum supervisor ("stratum up" or "stratum server" in the
foreground, or under systemd) for the state of each service it runs: etcd, the
kube-apiserver, the VIP and the operator. Exits 1 when no supervisor answers or a
service is not running.`,
		Example: `  stratum status`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, h, err := a.localNode()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVICE\tSTATE")
			var down []string
			for _, name := range supervisedServices {
				st, err := h.ServiceStatus(cmd.Context(), name)
				if err != nil {
					return explainHost(fmt.Errorf("status of %s: %w", name, err))
				}
				if !st.Running {
					down = append(down, name)
				}
				fmt.Fprintf(tw, "%s\t%s\n", name, st.Detail)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(down) > 0 {
				return fmt.Errorf("not running: %s (logs in %s)", strings.Join(down, ", "), controlplane.LogDir)
			}
			return nil
		},
	}
}

// checkWritableFile refuses a path whose directory is missing or not
// writable, or that is a directory, without creating anything.
func checkWritableFile(p string) error {
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".stratum-probe-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// writeFileAtomic writes data to p through a temporary file in its directory,
// renamed into place, so a reader never sees half a file.
func writeFileAtomic(p string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}
