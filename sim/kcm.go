package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/version"
)

// controllerManager is a real kube-controller-manager running only the
// controllers scenarios need: owner-reference garbage collection and the
// bootstrap-token cleaner.
type controllerManager struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartControllerManager starts kube-controller-manager against the host's own
// apiserver, leader-elected so several hosts may run one.
func (h *Host) StartControllerManager(ctx context.Context) error {
	h.mu.Lock()
	if h.kcm != nil {
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	bin, err := assets.KubeControllerManager()
	if err != nil {
		return err
	}
	kc, err := h.files.ReadFile(version.Kubeconfig("controller-manager"))
	if err != nil {
		return fmt.Errorf("start kube-controller-manager on %s: %w", h.name, err)
	}
	local, err := kubeconfig.Repoint(kc, h.APIServerURL())
	if err != nil {
		return err
	}
	const localConf = "/etc/stratum/sim-controller-manager.conf"
	if err := h.files.WriteFile(localConf, local, 0o600); err != nil {
		return err
	}
	logPath := h.Path("/var/log/kube-controller-manager.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+h.Path(localConf),
		"--authentication-kubeconfig="+h.Path(localConf),
		"--authorization-kubeconfig="+h.Path(localConf),
		"--controllers=garbage-collector-controller,token-cleaner-controller",
		// Each controller acts as its own service account with its own
		// role, as on a kubeadm control plane; the controller manager's own
		// identity may not delete what the garbage collector must.
		"--use-service-account-credentials=true",
		"--leader-elect=true",
		"--leader-elect-lease-duration=2s",
		"--leader-elect-renew-deadline=1500ms",
		"--leader-elect-retry-period=250ms",
		"--bind-address="+h.ip.String(),
		"--secure-port=10257",
		"--cert-dir="+h.Path("/var/lib/stratum/kcm-certs"),
		"--v=1",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := startChild(cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("start kube-controller-manager on %s: %w", h.name, err)
	}
	m := &controllerManager{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(m.done) }()
	select {
	case <-m.done:
		tail, _ := os.ReadFile(logPath)
		return fmt.Errorf("kube-controller-manager on %s exited at start; log %s ends: %s", h.name, logPath, lastLines(string(tail), 5))
	case <-time.After(300 * time.Millisecond):
	}
	h.mu.Lock()
	h.kcm = m
	h.mu.Unlock()
	h.cluster.events.Record(h.name, "service", "kube-controller-manager started")
	return nil
}

// StopControllerManager stops it.
func (h *Host) StopControllerManager() {
	h.mu.Lock()
	m := h.kcm
	h.kcm = nil
	h.mu.Unlock()
	if m == nil {
		return
	}
	stopChild(m.cmd, m.done, syscall.SIGTERM, 10*time.Second)
	h.cluster.events.Record(h.name, "service", "kube-controller-manager stopped")
}
