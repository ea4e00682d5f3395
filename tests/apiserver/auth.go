package main

// Authentication, as kube-apiserver's union authenticator with --client-ca-file and the
// service-account token authenticator, --anonymous-auth=false:
//
//   - x509 first (k8s.io/apiserver/pkg/authentication/request/x509): the TLS handshake only
//     *requests* a client certificate (tls.RequestClientCert, as the apiserver does when a client
//     CA is configured), and the authenticator verifies the chain against the client CA with
//     ExtKeyUsageClientAuth. user = Subject CN, groups = every Subject O, in order. A certificate
//     without CN authenticates nobody; one that fails verification is an error that the union
//     authenticator records and moves past, so a valid bearer token still authenticates the
//     request;
//   - then the bearer token (token.go);
//   - every authenticated user gets system:authenticated appended (AuthenticatedGroupAdder).
// Nothing authenticated = 401.

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
)

type x509Authenticator struct {
	roots *x509.CertPool
}

func loadClientCA(path string) (*x509Authenticator, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s: no certificates", path)
	}
	return &x509Authenticator{roots: pool}, nil
}

// authenticate returns the certificate's user, or nil.
func (a *x509Authenticator) authenticate(r *http.Request) *userInfo {
	if a == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	chain := r.TLS.PeerCertificates
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: a.roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil
	}
	cn := chain[0].Subject.CommonName
	if cn == "" {
		return nil
	}
	return &userInfo{Name: cn, Groups: append([]string(nil), chain[0].Subject.Organization...)}
}

// authenticate is the union: client certificate, then bearer token.
func (s *apiServer) authenticate(r *http.Request) *userInfo {
	u := s.x509.authenticate(r)
	if u == nil {
		u = s.authenticateToken(r)
	}
	if u == nil {
		return nil
	}
	for _, g := range u.Groups {
		if g == "system:authenticated" {
			return u
		}
	}
	u.Groups = append(u.Groups, "system:authenticated")
	return u
}

// authenticateToken returns nil for a missing or invalid bearer token.
func (s *apiServer) authenticateToken(r *http.Request) *userInfo {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	if len(auth) < 7 || !strings.EqualFold(auth[:7], "bearer ") {
		return nil
	}
	u, err := s.signer.verify(strings.TrimSpace(auth[7:]))
	if err != nil {
		return nil
	}
	return u
}
