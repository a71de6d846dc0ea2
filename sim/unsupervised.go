package sim

import (
	"context"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/supervisor"
)

// Unsupervised is h with its services reached through a stratum supervisor
// socket at socket, where nobody answers: a real host whose `stratum up`
// is stopped (after a crash, or a quorum loss that keeps it failing). Every
// service call fails with supervisor.ErrNotRunning, as there.
func Unsupervised(h *Handle, socket string) host.Host {
	return unsupervised{Handle: h, c: supervisor.Client{Path: socket}}
}

type unsupervised struct {
	*Handle
	c supervisor.Client
}

func (u unsupervised) StartService(ctx context.Context, name string) error {
	return u.c.StartService(ctx, name)
}

func (u unsupervised) StopService(ctx context.Context, name string) error {
	return u.c.StopService(ctx, name)
}

func (u unsupervised) RestartService(ctx context.Context, name string) error {
	return u.c.RestartService(ctx, name)
}

func (u unsupervised) ServiceStatus(ctx context.Context, name string) (host.ServiceStatus, error) {
	return u.c.ServiceStatus(ctx, name)
}

func (u unsupervised) CheckServices(ctx context.Context, names []string) error {
	return u.c.CheckServices(ctx, names)
}
