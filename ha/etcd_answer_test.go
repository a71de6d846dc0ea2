package ha

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestAnAnswerThatIsNoGRPCIsUnreachable: a member whose HTTP server answers
// a gRPC request without answering it (a member stopping: its gRPC server
// stopped, its HTTP server still taking a kept-alive connection's request;
// net/http then sends 200 OK with no content type) is a member that did not
// answer, so another is asked; etcd's own refusals still are not.
func TestAnAnswerThatIsNoGRPCIsUnreachable(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.URL}, TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cli.MemberList(ctx)
	if err == nil || !strings.Contains(err.Error(), notGRPCAnswer) {
		t.Fatalf("a gRPC request answered 200 OK without content: %v, want grpc-go's %q", err, notGRPCAnswer)
	}
	if !unreachable(err) {
		t.Errorf("unreachable(%v) = false, want true: another member is asked", err)
	}
	if unreachable(rpctypes.ErrGRPCUnhealthy) || unreachable(rpctypes.ErrGRPCMemberNotLearner) {
		t.Error("etcd's refusals taken for members that did not answer")
	}
}
