// Package apiretry runs a Kubernetes API step again when it lost its
// connection mid-request or conflicted with a concurrent writer.
//
// Clients reach the control planes through the VIP, and a VIP that moves to
// another control plane (its holder lost the lease: an etcd restart under its
// apiserver, a busy host) closes every connection through it. client-go
// retries a GET that lost its connection, never a write: the write may or
// may not have been applied. A step that reads what is there before it
// writes, and so converges when run again, can be re-run instead, as kubeadm
// retries its API writes: a failover then costs the step a pause, not the
// operator a re-run.
package apiretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// LostConnection reports whether err is a request that lost its way to the
// apiserver: the connection was refused, reset, closed before the response
// (EOF) or before the request was written (a broken pipe, a TLS handshake
// that timed out, a kept-alive connection the server had closed, or an
// HTTP/2 connection closed before its first request
// or while its body was being sent), its HTTP/2 connection or
// stream was lost, its answer's body was cut, or the dial timed out or
// found no route. The request may or may not
// have been applied; the address is likely served again once a VIP failover
// ends. An answer the apiserver gave (any status) is not a lost connection.
func LostConnection(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	if utilnet.IsProbableEOF(err) || utilnet.IsConnectionReset(err) || utilnet.IsConnectionRefused(err) || utilnet.IsHTTP2ConnectionLost(err) {
		return true
	}
	// A response whose body was cut: client-go wraps the read's error.
	var stream http2.StreamError
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.As(err, &stream) {
		return true
	}
	// A write on a connection the other side already closed, and an HTTP/2
	// connection closed before or while a request went out (the transport's
	// errors are unexported, in golang.org/x/net and in net/http's copy
	// alike, so their text is matched, as apimachinery matches its GOAWAY).
	if errors.Is(err, syscall.EPIPE) {
		return true
	}
	for _, text := range http2Closed {
		if strings.Contains(err.Error(), text) {
			return true
		}
	}
	// A TLS handshake that did not finish in time (a kube-apiserver just
	// started on a busy host took longer than client-go's 10 s): nothing of
	// the request was sent. A kept-alive connection the server closed as
	// the request went out on it (a VIP's old holder, an apiserver
	// stopping): net/http sends a GET again itself, a write it returns.
	if strings.Contains(err.Error(), tlsHandshakeTimeout) || strings.Contains(err.Error(), serverClosedIdle) {
		return true
	}
	if errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && op.Timeout()
}

// net/http's errors, whose values are unexported: a TLS handshake past the
// transport's TLSHandshakeTimeout, and a request written on a kept-alive
// connection the server had closed.
const (
	tlsHandshakeTimeout = "net/http: TLS handshake timeout"
	serverClosedIdle    = "http: server closed idle connection"
)

// http2Closed are the HTTP/2 transport's errors for a connection that closed
// before its first request was sent, and for one that closed while a
// request's body waited to be sent (the headers may have gone out).
var http2Closed = []string{
	"http2: client conn could not be established",
	"http2: client conn is closed",
}

// Timing of Ensure's retries.
const (
	// LostWait bounds how long Ensure keeps re-running a step whose
	// connection is lost, counted from the first loss: above a VIP failover
	// (kube-vip's 5 s lease runs out, the next holder takes it and
	// announces the address), far below an operation's own timeouts.
	LostWait = 30 * time.Second
	// lostFirstPause is the pause after the first lost connection; it
	// doubles up to lostMaxPause.
	lostFirstPause = 100 * time.Millisecond
	lostMaxPause   = 2 * time.Second
	// conflictTries is how often a step that keeps conflicting runs, as
	// retry.RetryOnConflict's retry.DefaultRetry.
	conflictTries = 5
	conflictPause = 10 * time.Millisecond
)

// Ensure runs step until it succeeds or fails with what a re-run cannot
// mend. step must read what is there before it writes, so that running it
// again converges whether or not its last write was applied. A conflict
// (another writer came first; a create that lost a race reports one) runs it
// again at once, up to conflictTries times in all; a lost connection runs it
// again after a pause, until LostWait has passed since the first loss. The
// last error is returned as step returned it; a ctx that ends stops the
// retries and returns the error that made the last one.
func Ensure(ctx context.Context, step func() error) error {
	conflicts := 0
	var lost lostBackoff
	for {
		err := step()
		var wait time.Duration
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			conflicts++
			if conflicts >= conflictTries {
				return err
			}
			wait = conflictPause
		case LostConnection(err):
			var again bool
			if wait, again = lost.next(); !again {
				return err
			}
		default:
			return err
		}
		if !sleep(ctx, wait) {
			return err
		}
	}
}

// lostBackoff paces the re-runs after lost connections: lostFirstPause,
// doubling to lostMaxPause, until LostWait has passed since the first.
type lostBackoff struct {
	since time.Time
	pause time.Duration
}

// next is the pause before the next run, and false once LostWait has passed.
func (b *lostBackoff) next() (time.Duration, bool) {
	now := time.Now()
	if b.since.IsZero() {
		b.since, b.pause = now, lostFirstPause
	}
	left := LostWait - now.Sub(b.since)
	if left <= 0 {
		return 0, false
	}
	wait := min(b.pause, left)
	b.pause = min(2*b.pause, lostMaxPause)
	return wait, true
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// RetryReads wraps rt so that a read — a GET, not a watch, a followed log or
// an upgrade — that lost its connection, before its answer or while its body
// was read, is sent again, paced as Ensure paces lost connections, until
// LostWait has passed or the request's context ends. The answer's body is
// read whole before it is handed on, so a body cut midway is retried here
// rather than returned. Writes pass through untouched: whether one that lost
// its answer was applied is for the step that made it to judge (Ensure).
// It fits rest.Config's Wrap.
func RetryReads(rt http.RoundTripper) http.RoundTripper { return readRetrier{rt} }

type readRetrier struct{ rt http.RoundTripper }

func (r readRetrier) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	if req.Method != http.MethodGet || q.Get("watch") == "true" || q.Get("follow") == "true" || req.Header.Get("Upgrade") != "" {
		return r.rt.RoundTrip(req)
	}
	var lost lostBackoff
	for {
		resp, err := r.rt.RoundTrip(req.Clone(req.Context()))
		if err == nil {
			var body []byte
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
				return resp, nil
			}
		}
		if !LostConnection(err) {
			return nil, err
		}
		wait, again := lost.next()
		if !again || !sleep(req.Context(), wait) {
			return nil, err
		}
	}
}

// readyzTimeout bounds RetryRefusedWhileUnready's question to /readyz.
const readyzTimeout = 5 * time.Second

// RetryRefusedWhileUnready returns a wrapper (for rest.Config's Wrap)
// under which a request refused 401 Unauthorized or 403 Forbidden by an
// apiserver that is not ready, its /readyz answering neither 200 nor 401
// (asked without the request's headers; a client certificate still goes
// with it), is sent again, paced as Ensure paces lost connections, until
// LostWait has passed since the first such answer; waiting, when not nil, is
// told why before each pause. A request whose context ends meanwhile returns
// its context's error, not the refusal. An apiserver serves before its
// informers have synced: its bootstrap-token authenticator reads the tokens'
// Secrets from one, and refuses every bootstrap token until it has (401),
// and its RBAC authorizer reads the roles and bindings from others, and
// denies what they would allow until they have (403, "informers not
// synced"); a join that meets a control plane restarting would take either
// for its token or its grant being gone. A ready apiserver's refusal is the
// credential's own fault and is returned after one more try (the server may
// have become ready since its answer); so is a 401 that /readyz answers too
// (a client certificate the server refuses), and a refusal of a request
// whose body cannot be sent again. A refused request was not applied, so a
// write is sent again as safely as a read. The client's own timeout bounds
// the whole, waits included.
func RetryRefusedWhileUnready(waiting func(why string)) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return unreadyRetrier{rt, waiting} }
}

type unreadyRetrier struct {
	rt      http.RoundTripper
	waiting func(string)
}

func (r unreadyRetrier) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return r.rt.RoundTrip(req)
	}
	var lost lostBackoff
	readyBefore := false
	for {
		resp, err := r.rt.RoundTrip(req)
		if err != nil || (resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden) {
			return resp, err
		}
		// Kept whole: the answer returned if the wait ends, its
		// connection freed for the question to /readyz.
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if rerr != nil {
			return resp, nil
		}
		var wait time.Duration
		if why, credentials := r.unready(req); credentials {
			return resp, nil
		} else if why == "" {
			// Ready now, but maybe only since its answer: once more.
			if readyBefore {
				return resp, nil
			}
			readyBefore = true
		} else {
			readyBefore = false
			var again bool
			if wait, again = lost.next(); !again {
				return resp, nil
			}
			if r.waiting != nil {
				r.waiting(fmt.Sprintf("%s to accept this client's credentials: it answered %s while not ready (%s), as an API server just started does before its informers have synced", req.URL.Host, resp.Status, why))
			}
		}
		if !sleep(req.Context(), wait) {
			return nil, context.Cause(req.Context())
		}
		if req, err = resend(req); err != nil {
			return resp, nil
		}
	}
}

// unready asks req's server for /readyz with none of req's headers, and
// says why it is not ready ("" when it answers 200); credentials reports a
// 401 there too, the client's certificate refused, not a server unready.
func (r unreadyRetrier) unready(req *http.Request) (why string, credentials bool) {
	ctx, cancel := context.WithTimeout(req.Context(), readyzTimeout)
	defer cancel()
	u := url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host, Path: "/readyz"}
	q, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err.Error(), false
	}
	resp, err := r.rt.RoundTrip(q)
	if err != nil {
		return "/readyz: " + err.Error(), false
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return "", false
	case http.StatusUnauthorized:
		return "", true
	}
	return fmt.Sprintf("/readyz answered %s", resp.Status), false
}

// resend is req to send again, its body read anew.
func resend(req *http.Request) (*http.Request, error) {
	again := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		again.Body = body
	}
	return again, nil
}
