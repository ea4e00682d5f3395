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
//	    --sa-signing-key SA.key --debug-listen 127.0.0.1:8080 \
//	    [--client-ca-file CA] [--max-requests-inflight N] [--max-mutating-requests-inflight N] \
//	    [--max-inflight-per-level LEVEL=N,...] [--request-timeout 1m] [--test-delays] [--watch-cache=false]
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
	debugListen := fs.String("debug-listen", "127.0.0.1:0", "plain-HTTP debug listener (/debug/counts, /debug/apf, /healthz)")
	clientCA := fs.String("client-ca-file", "", "verify client certificates against this CA (user = CN, groups = O)")
	maxInflight := fs.Int("max-requests-inflight", 400, "APF: with --max-mutating-requests-inflight, the server's total concurrency limit")
	maxMutating := fs.Int("max-mutating-requests-inflight", 200, "APF: see --max-requests-inflight")
	levelLimits := fs.String("max-inflight-per-level", "", "APF: explicit concurrency limits, e.g. workload-low=2,global-default=1 (exempt is never limited)")
	requestTimeout := fs.Duration("request-timeout", time.Minute, "APF: a request waits in its queue at most a quarter of this")
	testDelays := fs.Bool("test-delays", false, "test only: honour the X-Stormwatch-Test-Delay request header (sleep that long in the APF seat)")
	watchCache := fs.Bool("watch-cache", true, "serve LIST/GET with resourceVersion set from a watch-fed cache")
	http2Stack := fs.String("http2-stack", "xnet", "HTTP/2 server: xnet (golang.org/x/net/http2, via http2.ConfigureServer) or std (net/http's bundled copy)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *http2Stack != "xnet" && *http2Stack != "std" {
		fmt.Fprintln(os.Stderr, "--http2-stack: expected xnet or std, got", *http2Stack)
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

	limits, err := parseLevelLimits(*levelLimits)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	counts := newRequestCounts()
	api := newAPIServer(st, signer, counts, *listen)
	api.testDelays = *testDelays
	if *clientCA != "" {
		if api.x509, err = loadClientCA(*clientCA); err != nil {
			log.Print(err)
			return 1
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	api.apf, err = newAPFController(ctx, st, apfConfig{serverCL: *maxInflight + *maxMutating, levelLimits: limits,
		waitLimit: *requestTimeout / 4, retryAfterSec: 1})
	cancel()
	if err != nil {
		log.Printf("apf: %v", err)
		return 1
	}
	cacheCtx, stopCache := context.WithCancel(context.Background())
	defer stopCache()
	if *watchCache {
		if api.cache, err = startWatchCache(cacheCtx, st); err != nil {
			log.Printf("watch cache: %v", err)
			return 1
		}
	}

	// The secure listener: TLS, ALPN h2 + http/1.1. With --http2-stack=xnet (the default),
	// http2.ConfigureServer installs x/net's server in TLSNextProto["h2"], so net/http never
	// falls back to its bundled copy (net/http.(*http2serverConn)); with std it does.
	srv := &http.Server{
		Handler:           api,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(os.Stderr, "test-apiserver: http: ", log.LstdFlags),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
		},
	}
	if api.x509 != nil {
		// Like the apiserver: ask for a certificate, verify it in the authenticator (auth.go).
		srv.TLSConfig.ClientAuth = tls.RequestClientCert
	}
	if *http2Stack == "std" {
		// --http2-stack=std: net/http negotiates h2 itself and serves it with its bundled copy
		// (net/http.(*http2serverConn), as recent kube-apiservers do). Before Go 1.24 that copy
		// cannot be configured: it allows 250 concurrent streams per connection, not 1000.
		srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
	} else if err := http2.ConfigureServer(srv, &http2.Server{MaxConcurrentStreams: 1000}); err != nil {
		// Same stream concurrency as kube-apiserver's default (--http2-max-streams-per-connection=1000).
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
	debugMux := newDebugMux(counts, map[string]http.HandlerFunc{"/debug/apf": api.serveDebugAPF, "/debug/storage": api.serveDebugStorage})

	errc := make(chan error, 2)
	go func() { errc <- srv.ServeTLS(ln, *certFile, *keyFile) }()
	go func() { errc <- serveDebug(dln, debugMux) }()
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
	_ = dln.Close()
	return 0
}
