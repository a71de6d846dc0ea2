package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
)

// kcmSecurePort is kube-controller-manager's secure port (StartControllerManager).
const kcmSecurePort = 10257

// The signature host.Services' CheckServices will have once it is merged.
var _ interface {
	CheckServices(ctx context.Context, names []string) error
} = (*Handle)(nil)

// BreakServices makes every later service start and service check on the
// host fail with err, as on a host whose service manager or binaries are
// broken, until MendServices. Running services are left as they are.
func (h *Host) BreakServices(err error) {
	h.mu.Lock()
	h.brokenServices = err
	h.mu.Unlock()
	h.cluster.events.Record(h.name, "fault", "services broken: %v", err)
}

// MendServices undoes BreakServices.
func (h *Host) MendServices() {
	h.mu.Lock()
	h.brokenServices = nil
	h.mu.Unlock()
	h.cluster.events.Record(h.name, "heal", "services mended")
}

// servicesBroken is the BreakServices error for the named attempt (recorded
// as a fault), nil when the host's services are not broken.
func (h *Host) servicesBroken(what string) error {
	h.mu.Lock()
	broken := h.brokenServices
	h.mu.Unlock()
	if broken == nil {
		return nil
	}
	h.cluster.events.Record(h.name, "fault", "%s refused: services broken: %v", what, broken)
	return fmt.Errorf("%s on %s: the host's service manager is broken, nothing was started or changed: %w", what, h.name, broken)
}

// checkServices is CheckServices: every named service is checked, and the
// problems of all of them are reported together.
func (h *Host) checkServices(_ context.Context, names []string) error {
	if err := h.servicesBroken(fmt.Sprintf("check services %v", names)); err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if err := h.checkService(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkService reports whether the named service could be started on the
// host now.
func (h *Host) checkService(name string) error {
	h.mu.Lock()
	etcdVersion := h.etcdVersion
	h.mu.Unlock()
	st, err := h.serviceStatus(name) // unknown names: host.ErrUnknownService
	if err != nil {
		return err
	}
	switch name {
	case ServiceEtcd:
		if etcdVersion != "" {
			if _, err := assets.Etcd(etcdVersion); err != nil {
				return fmt.Errorf("%s cannot start etcd %s: %w", h.name, etcdVersion, err)
			}
		}
		if st.Running {
			return nil
		}
		return errors.Join(h.checkPortFree(name, version.EtcdClientPort), h.checkPortFree(name, version.EtcdPeerPort))
	case ServiceAPIServer:
		if _, err := assets.KubeAPIServer(); err != nil {
			return fmt.Errorf("%s cannot start kube-apiserver: %w", h.name, err)
		}
		if st.Running {
			return nil
		}
		return h.checkPortFree(name, version.APIServerPort)
	case ServiceControllerManager:
		if _, err := assets.KubeControllerManager(); err != nil {
			return fmt.Errorf("%s cannot start kube-controller-manager: %w", h.name, err)
		}
		if st.Running {
			return nil
		}
		return h.checkPortFree(name, kcmSecurePort)
	case ServiceVIP:
		if !h.cluster.cfg.VIP {
			return fmt.Errorf("%s cannot start kube-vip: the simulated cluster has no VIP (sim.Config.VIP is off)", h.name)
		}
		return nil
	}
	return fmt.Errorf("%s: %w %q", h.name, host.ErrUnknownService, name)
}

// checkPortFree reports an error unless port on the host's address can be
// listened on now.
func (h *Host) checkPortFree(service string, port int) error {
	addr := net.JoinHostPort(h.ip.String(), strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s cannot start %s: its port %s is taken by another process (%w); stop whatever listens there, then retry", h.name, service, addr, err)
	}
	return ln.Close()
}
