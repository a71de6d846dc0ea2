package apiretry

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// update sends a ConfigMap Update, the kind of write client-go never
// retries itself, to the server at addr and returns its error.
func update(t *testing.T, addr string) error {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", ResourceVersion: "1"}}
	_, err = cs.CoreV1().ConfigMaps("default").Update(context.Background(), cm, metav1.UpdateOptions{})
	return err
}

// serve accepts connections on a fresh loopback listener and hands each to
// handle, until the test ends.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return ln.Addr().String()
}

func TestLostConnection(t *testing.T) {
	closedMidRequest := serve(t, func(c net.Conn) {
		// Read the request, as an apiserver behind a moving VIP would,
		// then lose the connection before any answer.
		_, _ = http.ReadRequest(bufio.NewReader(c))
		c.Close()
	})
	reset := serve(t, func(c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	answered := serve(t, func(c net.Conn) {
		_, _ = http.ReadRequest(bufio.NewReader(c))
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"the object has been modified"}`
		fmt.Fprintf(c, "HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		c.Close()
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name string
		addr string
		lost bool
	}{
		{"closed before the answer", closedMidRequest, true},
		{"reset before the answer", reset, true},
		{"nothing listens", refused, true},
		{"the apiserver answered 409", answered, false},
	} {
		err := update(t, tc.addr)
		if err == nil {
			t.Fatalf("%s: the update succeeded", tc.name)
		}
		if got := LostConnection(err); got != tc.lost {
			t.Errorf("%s: LostConnection(%v) = %v, want %v", tc.name, err, got, tc.lost)
		}
		if wrapped := fmt.Errorf("write ConfigMap: %w", err); LostConnection(wrapped) != tc.lost {
			t.Errorf("%s: wrapped, LostConnection(%v) = %v, want %v", tc.name, wrapped, !tc.lost, tc.lost)
		}
	}
	if LostConnection(nil) || LostConnection(errors.New("unexpected EOF")) {
		t.Error("nil, or a message that merely reads like a lost connection, counted as one")
	}
}

// TestLostConnectionInTheHandshake: a server that accepts the connection
// but does not finish the TLS handshake in time (a kube-apiserver just
// started on a busy host) lost the request before any of it was sent.
func TestLostConnectionInTheHandshake(t *testing.T) {
	silent := serve(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(io.Discard, c) // held, silent, until the client gives up
	})
	client := &http.Client{Transport: &http.Transport{TLSHandshakeTimeout: 100 * time.Millisecond, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	_, err := client.Get("https://" + silent + "/readyz")
	if err == nil || !LostConnection(err) {
		t.Fatalf("a TLS handshake that timed out: LostConnection(%v) = false, want true", err)
	}
}

// TestLostConnectionAfterTheHandshake: a connection the VIP's forwarder cuts
// right after its TLS handshake (HTTP/2 agreed, the client's first request
// not yet answered) is lost, whichever way the client meets it: the
// HTTP/2 transport's "client conn could not be established" (the connection
// closed before the request went out) or "client conn is closed" (closed
// while the request's body waited to go out), a write on it that finds the
// pipe broken, or the answer's unexpected EOF. Which one comes is a race, so
// the update runs many times; clean-clone CI runs met the first in `stratum
// token create`, and the second here.
func TestLostConnectionAfterTheHandshake(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	cut := serve(t, func(c net.Conn) {
		tc := tls.Server(c, &tls.Config{Certificates: srv.TLS.Certificates, NextProtos: []string{"h2"}})
		_ = tc.Handshake()
		tc.Close()
	})
	cfg := &rest.Config{Host: "https://" + cut, Timeout: 5 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}}
	seen := map[string]int{}
	for range 30 {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", ResourceVersion: "1"}}
		_, err = cs.CoreV1().ConfigMaps("default").Update(context.Background(), cm, metav1.UpdateOptions{})
		if err == nil {
			t.Fatal("an update through a connection cut after its handshake succeeded")
		}
		if !LostConnection(err) {
			t.Errorf("LostConnection(%v) = false, want true", err)
		}
		seen[errorKind(err)]++
	}
	t.Logf("errors met: %v", seen)
	// Each way, as the client reports it, whether or not this run met it.
	for _, err := range []error{
		&url.Error{Op: "Put", URL: "https://" + cut, Err: errors.New("http2: client conn could not be established")},
		&url.Error{Op: "Put", URL: "https://" + cut, Err: errors.New("http2: client conn is closed")},
		&url.Error{Op: "Put", URL: "https://" + cut, Err: &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}},
		&url.Error{Op: "Put", URL: "https://" + cut, Err: errors.New("http: server closed idle connection")},
	} {
		if !LostConnection(err) {
			t.Errorf("LostConnection(%v) = false, want true", err)
		}
	}
}

// errorKind is the last part of a client error's message, for the log.
func errorKind(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

func TestEnsure(t *testing.T) {
	closed := serve(t, func(c net.Conn) { c.Close() })
	lost := update(t, closed)
	if !LostConnection(lost) {
		t.Fatalf("setup: %v is not a lost connection", lost)
	}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "c", errors.New("modified"))
	refusal := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "c", errors.New("no"))
	ctx := context.Background()

	runs := 0
	err := Ensure(ctx, func() error {
		runs++
		if runs < 3 {
			return lost
		}
		return nil
	})
	if err != nil || runs != 3 {
		t.Errorf("two lost connections then success: err %v after %d runs, want nil after 3", err, runs)
	}

	runs = 0
	err = Ensure(ctx, func() error { runs++; return conflict })
	if !apierrors.IsConflict(err) || runs != conflictTries {
		t.Errorf("a step that keeps conflicting: err %v after %d runs, want the conflict after %d", err, runs, conflictTries)
	}

	runs = 0
	err = Ensure(ctx, func() error { runs++; return refusal })
	if !apierrors.IsForbidden(err) || runs != 1 {
		t.Errorf("a refusal: err %v after %d runs, want it after 1", err, runs)
	}

	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	runs = 0
	err = Ensure(cctx, func() error { runs++; return lost })
	if !LostConnection(err) || cctx.Err() == nil {
		t.Errorf("a connection lost until ctx ends: err %v (ctx %v), want the lost connection after ctx ended", err, cctx.Err())
	}
	if runs < 2 {
		t.Errorf("a lost connection ran %d times before ctx ended, want it run again", runs)
	}
}

// TestRetryRefusedWhileUnready: a 401 from a server whose /readyz
// (asked without credentials) is not 200 is sent again, a write with its
// body, until the server accepts it, with the wait said; a ready server's
// 401 is returned at once, as is one whose wait ran out.
func TestRetryRefusedWhileUnready(t *testing.T) {
	var mu sync.Mutex
	ready, unauthorized, readyzUnauthorized := false, 0, false
	refusal := http.StatusUnauthorized // what the unready server answers
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/readyz" {
			if r.Header.Get("Authorization") != "" {
				t.Errorf("/readyz asked with credentials")
			}
			if readyzUnauthorized {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
			if !ready {
				http.Error(w, "[-]informer-sync failed", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, "ok")
			return
		}
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		if unauthorized > 0 {
			unauthorized--
			if unauthorized == 0 {
				ready = true // synced: this was the last refusal
			}
			http.Error(w, fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d}`, refusal), refusal)
			return
		}
		fmt.Fprint(w, "{}")
	}))
	defer srv.Close()
	var said []string
	client := &http.Client{Transport: RetryRefusedWhileUnready(func(why string) { said = append(said, why) })(http.DefaultTransport)}
	post := func() *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/namespaces/kube-system/configmaps", strings.NewReader("the body"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer abcdef.0123456789abcdef")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	// Unready for two answers: the write goes through on its third send.
	mu.Lock()
	ready, unauthorized, bodies = false, 2, nil
	mu.Unlock()
	if resp := post(); resp.StatusCode != http.StatusOK {
		t.Fatalf("a write refused twice by an unready server: %s, want it sent again until accepted", resp.Status)
	}
	if len(bodies) != 3 || bodies[2] != "the body" {
		t.Fatalf("bodies received %q, want the body three times", bodies)
	}
	if len(said) != 1 || !strings.Contains(said[0], "401 Unauthorized while not ready (/readyz answered 500") {
		t.Fatalf("the wait said %q", said)
	}

	// Its RBAC authorizer not yet synced: 403 Forbidden, as for 401.
	mu.Lock()
	ready, unauthorized, bodies, refusal, said = false, 2, nil, http.StatusForbidden, nil
	mu.Unlock()
	if resp := post(); resp.StatusCode != http.StatusOK || len(bodies) != 3 {
		t.Fatalf("a write forbidden twice by an unready server: %s after %d sends, want it sent again until accepted", resp.Status, len(bodies))
	}
	if len(said) != 1 || !strings.Contains(said[0], "403 Forbidden while not ready (/readyz answered 500") {
		t.Fatalf("the wait said %q", said)
	}
	mu.Lock()
	ready, unauthorized, bodies = true, 1000, nil
	mu.Unlock()
	if resp := post(); resp.StatusCode != http.StatusForbidden || len(bodies) != 2 {
		t.Fatalf("a ready server's 403: %s after %d sends, want it after 2 sends", resp.Status, len(bodies))
	}
	mu.Lock()
	refusal = http.StatusUnauthorized
	mu.Unlock()

	// A ready server's 401 is the credential's: returned after one more
	// send (it may have become ready between its answer and the question).
	mu.Lock()
	ready, unauthorized, bodies = true, 1000, nil
	mu.Unlock()
	start := time.Now()
	if resp := post(); resp.StatusCode != http.StatusUnauthorized || len(bodies) != 2 || time.Since(start) > 2*time.Second {
		t.Fatalf("a ready server's 401: %s after %d sends and %s, want it after 2 sends, at once", resp.Status, len(bodies), time.Since(start))
	}

	// A client certificate the server refuses: /readyz answers 401 too,
	// and the 401 is the credential's, returned at once.
	mu.Lock()
	ready, unauthorized, bodies, readyzUnauthorized = false, 1000, nil, true
	mu.Unlock()
	start = time.Now()
	if resp := post(); resp.StatusCode != http.StatusUnauthorized || len(bodies) != 1 || time.Since(start) > 2*time.Second {
		t.Fatalf("a 401 that /readyz answers too: %s after %d sends and %s, want it after 1 send, at once", resp.Status, len(bodies), time.Since(start))
	}

	// A server that never becomes ready, and the request's context ends
	// meanwhile: its context's error, not the 401 (which a caller would
	// take for the token's fault).
	mu.Lock()
	ready, unauthorized, bodies, readyzUnauthorized = false, 1<<30, nil, false
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/namespaces/kube-system/secrets/x", nil)
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a 401 from a server never ready, the context ending: %v %v, want the context's end", resp, err)
	}
	if len(bodies) < 2 {
		t.Fatalf("sent %d times before the context ended, want it sent again meanwhile", len(bodies))
	}
}
