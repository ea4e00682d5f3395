package main

// Bound service-account tokens, byte-compatible in shape with kube-apiserver 1.28's:
// a compact RS256 JWS whose header is {"alg":"RS256","kid":KID} (KID = base64url(sha256(PKIX
// DER of the public key)), as serviceaccount.keyIDFromPublicKey computes it) and whose claims
// are serialised with sorted keys, as go-jose does:
//
//	{"aud":[ISS],"exp":..,"iat":..,"iss":ISS,"kubernetes.io":{"namespace":NS,
//	 "pod":{"name":..,"uid":..},"serviceaccount":{"name":..,"uid":..}},"nbf":..,"sub":"system:serviceaccount:NS:NAME"}
//
// Implemented with crypto/rsa and encoding/base64 only, no JWT library, so that nothing here
// is more lenient or stricter than the real thing by accident.

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// defaultIssuer is kube-apiserver's --service-account-issuer on most clusters; it is also the
// default API audience (--api-audiences defaults to the issuer).
const defaultIssuer = "https://kubernetes.default.svc.cluster.local"

type objectRef struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

type tokenSigner struct {
	key *rsa.PrivateKey
	kid string
}

func loadTokenSigner(path string) (*tokenSigner, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	var key *rsa.PrivateKey
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		var k interface{}
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		if err == nil {
			var ok bool
			if key, ok = k.(*rsa.PrivateKey); !ok {
				err = fmt.Errorf("%s: not an RSA key", path)
			}
		}
	default:
		err = fmt.Errorf("%s: unexpected PEM block %q", path, block.Type)
	}
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return &tokenSigner{key: key, kid: base64.RawURLEncoding.EncodeToString(sum[:])}, nil
}

var b64 = base64.RawURLEncoding

// mint returns a signed token and its expiry.
func (s *tokenSigner) mint(ns, sa string, pod *objectRef, lifetime time.Duration, audiences []string) (string, time.Time, error) {
	now := time.Now()
	exp := now.Add(lifetime)
	k8s := map[string]interface{}{
		"namespace":      ns,
		"serviceaccount": objectRef{Name: sa, UID: stableUID("serviceaccount", ns, sa)},
	}
	if pod != nil {
		k8s["pod"] = *pod
	}
	claims := map[string]interface{}{ // a map: encoding/json sorts the keys, like go-jose
		"aud":           audiences,
		"exp":           exp.Unix(),
		"iat":           now.Unix(),
		"iss":           defaultIssuer,
		"kubernetes.io": k8s,
		"nbf":           now.Unix(),
		"sub":           serviceAccountUser(ns, sa),
	}
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": s.kid})
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", time.Time{}, err
	}
	signingInput := b64.EncodeToString(header) + "." + b64.EncodeToString(payload)
	digest := sha256.Sum256([]byte(signingInput))
	sig, err := rsa.SignPKCS1v15(nil, s.key, crypto.SHA256, digest[:])
	if err != nil {
		return "", time.Time{}, err
	}
	return signingInput + "." + b64.EncodeToString(sig), exp, nil
}

// userInfo is the authenticated identity, as user.Info in the apiserver.
type userInfo struct {
	Name   string
	Groups []string
}

var errInvalidToken = errors.New("invalid bearer token")

// verify checks a bearer token the way the apiserver's JWT authenticator does for bound
// service-account tokens: signature, algorithm, issuer, audience, nbf/exp (with the same 60 s
// leeway go-jose's ValidateWithLeeway is given), and a well-formed subject.
func (s *tokenSigner) verify(token string) (*userInfo, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errInvalidToken
	}
	hb, err1 := b64.DecodeString(parts[0])
	pb, err2 := b64.DecodeString(parts[1])
	sig, err3 := b64.DecodeString(parts[2])
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, errInvalidToken
	}
	var hdr struct {
		Alg string `json:"alg"`
		Kid string `json:"kid"`
	}
	if json.Unmarshal(hb, &hdr) != nil || hdr.Alg != "RS256" {
		return nil, errInvalidToken
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(&s.key.PublicKey, crypto.SHA256, digest[:], sig) != nil {
		return nil, errInvalidToken
	}
	var c struct {
		Iss string          `json:"iss"`
		Sub string          `json:"sub"`
		Aud json.RawMessage `json:"aud"`
		Exp int64           `json:"exp"`
		Nbf int64           `json:"nbf"`
		K8s struct {
			Namespace      string    `json:"namespace"`
			ServiceAccount objectRef `json:"serviceaccount"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(pb, &c) != nil || c.Iss != defaultIssuer {
		return nil, errInvalidToken
	}
	var auds []string
	if json.Unmarshal(c.Aud, &auds) != nil {
		var one string
		if json.Unmarshal(c.Aud, &one) != nil {
			return nil, errInvalidToken
		}
		auds = []string{one}
	}
	audOK := false
	for _, a := range auds {
		audOK = audOK || a == defaultIssuer
	}
	const leeway = 60
	now := time.Now().Unix()
	if !audOK || c.Exp == 0 || now > c.Exp+leeway || (c.Nbf != 0 && now < c.Nbf-leeway) {
		return nil, errInvalidToken
	}
	ns, name := c.K8s.Namespace, c.K8s.ServiceAccount.Name
	if ns == "" || name == "" || c.Sub != serviceAccountUser(ns, name) {
		return nil, errInvalidToken
	}
	return &userInfo{
		Name:   c.Sub,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}, nil
}

func serviceAccountUser(ns, name string) string {
	return "system:serviceaccount:" + ns + ":" + name
}

// stableUID derives a UUID-shaped uid from a name, so that a service account (which this
// server does not store) keeps the same uid in every token minted for it.
func stableUID(parts ...string) string {
	h := sha1.Sum([]byte(strings.Join(parts, "/")))
	h[6] = (h[6] & 0x0f) | 0x50 // version 5, RFC 4122 variant: shaped like a real UUID
	h[8] = (h[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
