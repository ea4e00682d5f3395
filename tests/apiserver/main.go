// Command test-apiserver is stormwatch's stand-in for kube-apiserver 1.28 in tests.
//
// It is not a mock: it serves TLS with HTTP/2 (through golang.org/x/net/http2's serverConn,
// exactly the code path the agent probes) and HTTP/1.1, authenticates bound service-account
// JWTs, stores objects in a real etcd with the apiserver's key layout and resourceVersion
// semantics, answers with the apiserver's Status bodies and headers, and serves enough
// discovery for a real kubectl. On a separate plain-HTTP debug listener it exposes the test
// oracle: a count of every request it handled, labelled like apiserver_request_total plus the
// client identity and protocol (/debug/counts).
//
// Usage:
//
//	test-apiserver --listen 127.0.0.1:6443 --tls-cert C --tls-key K \
//	    --etcd-endpoints https://127.0.0.1:2379 --etcd-cafile CA --etcd-certfile C --etcd-keyfile K \
//	    --sa-signing-key SA.key --debug-listen 127.0.0.1:8080
//	test-apiserver mint-token --sa-signing-key SA.key --namespace NS --serviceaccount NAME [--pod POD] [--expiration 1h]
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/net/http2"
)

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("test-apiserver: ")
	if len(os.Args) > 1 && os.Args[1] == "mint-token" {
		os.Exit(mintTokenCommand(os.Args[2:]))
	}
	os.Exit(serve(os.Args[1:]))
}

// mintTokenCommand prints a bound service-account token, as `kubectl create token` would get
// from the TokenRequest API, signed offline with the same key the server verifies with.
func mintTokenCommand(args []string) int {
	fs := flag.NewFlagSet("mint-token", flag.ContinueOnError)
	keyFile := fs.String("sa-signing-key", "", "PEM RSA private key the server verifies tokens with")
	ns := fs.String("namespace", "default", "service account namespace")
	sa := fs.String("serviceaccount", "", "service account name")
	pod := fs.String("pod", "", "bind the token to this pod (adds the kubernetes.io.pod claim)")
	exp := fs.Duration("expiration", time.Hour, "token lifetime")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *keyFile == "" || *sa == "" {
		fmt.Fprintln(os.Stderr, "mint-token: --sa-signing-key and --serviceaccount are required")
		return 2
	}
	signer, err := loadTokenSigner(*keyFile)
	if err != nil {
		log.Print(err)
		return 1
	}
	var podRef *objectRef
	if *pod != "" {
		podRef = &objectRef{Name: *pod, UID: stableUID("pod", *ns, *pod)}
	}
	tok, _, err := signer.mint(*ns, *sa, podRef, *exp, []string{defaultIssuer})
	if err != nil {
		log.Print(err)
		return 1
	}
	fmt.Println(tok)
	return 0
}

func serve(args []string) int {
	fs := flag.NewFlagSet("test-apiserver", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:6443", "secure (TLS) listen address")
	certFile := fs.String("tls-cert", "", "serving certificate (PEM)")
	keyFile := fs.String("tls-key", "", "serving key (PEM)")
	etcdEndpoints := fs.String("etcd-endpoints", "https://127.0.0.1:2379", "comma-separated etcd client URLs")
	etcdCA := fs.String("etcd-cafile", "", "CA that signed etcd's serving certificate")
	etcdCert := fs.String("etcd-certfile", "", "client certificate for etcd")
	etcdKey := fs.String("etcd-keyfile", "", "client key for etcd")
	saKey := fs.String("sa-signing-key", "", "PEM RSA private key; its public half verifies bearer tokens")
	debugListen := fs.String("debug-listen", "127.0.0.1:0", "plain-HTTP debug listener (/debug/counts, /healthz)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *certFile == "" || *keyFile == "" || *saKey == "" {
		fmt.Fprintln(os.Stderr, "--tls-cert, --tls-key and --sa-signing-key are required")
		return 2
	}

	signer, err := loadTokenSigner(*saKey)
	if err != nil {
		log.Print(err)
		return 1
	}
	st, err := newStore(*etcdEndpoints, *etcdCA, *etcdCert, *etcdKey)
	if err != nil {
		log.Printf("etcd: %v", err)
		return 1
	}
	defer st.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = st.ensureSystemNamespaces(ctx)
	cancel()
	if err != nil {
		log.Printf("etcd: creating system namespaces: %v", err)
		return 1
	}

	counts := newRequestCounts()
	api := newAPIServer(st, signer, counts, *listen)

	// The secure listener: TLS, ALPN h2 + http/1.1. http2.ConfigureServer installs x/net's
	// server in TLSNextProto["h2"], so net/http never falls back to its bundled copy
	// (net/http.(*http2serverConn)): the agent probes golang.org/x/net/http2.(*serverConn).
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(os.Stderr, "test-apiserver: http: ", log.LstdFlags),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
		},
	}
	// Same stream concurrency as kube-apiserver's default (--http2-max-streams-per-connection=1000).
	if err := http2.ConfigureServer(srv, &http2.Server{MaxConcurrentStreams: 1000}); err != nil {
		log.Printf("http2: %v", err)
		return 1
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Print(err)
		return 1
	}

	dln, err := net.Listen("tcp", *debugListen)
	if err != nil {
		log.Print(err)
		return 1
	}
	dsrv := &http.Server{Handler: newDebugMux(counts), ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(ln, *certFile, *keyFile) }()
	go func() { errc <- dsrv.Serve(dln) }()
	log.Printf("serving on https://%s (h2, http/1.1), debug on http://%s, etcd %s, pid %d",
		ln.Addr(), dln.Addr(), *etcdEndpoints, os.Getpid())

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-errc:
		log.Printf("serve: %v", err)
		return 1
	case <-sigc:
	}
	shutdownCtx, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	_ = srv.Shutdown(shutdownCtx)
	_ = dsrv.Shutdown(shutdownCtx)
	return 0
}
