package config

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestForwardAuthDescriptors(t *testing.T) {
	c := mustParse(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: route
    value: login
    descriptors:
      - key: method
        descriptors:
          - key: path
            rate_limit: {unit: minute, requests_per_unit: 5}
  - key: host
    descriptors:
      - key: api_key
        rate_limit: {unit: second, requests_per_unit: 100}
  - key: tenant
    value: acme*
    rate_limit: {unit: second, requests_per_unit: 1000}
forward_auth:
  proxy: nginx
  descriptors:
    - entries:
        - {key: remote_address, from: client_ip}
    - entries:
        - {key: route, value: login}
        - {key: method, from: method}
        - {key: path, from: path}
    - entries:
        - {key: host, from: host}
        - {key: api_key, from: header:x-api-key}
    - entries:
        - {key: tenant, from: "query:tenant"}
`)
	fa := c.ForwardAuth("web")
	if fa == nil {
		t.Fatal("ForwardAuth(web) = nil")
	}
	if got := fa.DenyStatus(); got != http.StatusTooManyRequests {
		t.Errorf("DenyStatus() = %d, want 429 by default", got)
	}
	if c.ForwardAuth("other") != nil {
		t.Error("ForwardAuth(unknown domain) != nil")
	}

	for _, tt := range []struct {
		name string
		req  values
		want [][]Entry
	}{
		{"everything", values{
			{Kind: ClientIP}: "203.0.113.7", {Kind: Method}: "POST", {Kind: Host}: "shop.example", {Kind: Path}: "/login",
			{Kind: Header, Name: "X-Api-Key"}: "k1", {Kind: Query, Name: "tenant"}: "acme",
		}, [][]Entry{
			{{"remote_address", "203.0.113.7"}},
			{{"route", "login"}, {"method", "POST"}, {"path", "/login"}},
			{{"host", "shop.example"}, {"api_key", "k1"}},
			{{"tenant", "acme"}},
		}},
		{"absent header and query: their descriptors are left out", values{
			{Kind: ClientIP}: "203.0.113.7", {Kind: Method}: "GET", {Kind: Host}: "shop.example", {Kind: Path}: "/",
		}, [][]Entry{
			{{"remote_address", "203.0.113.7"}},
			{{"route", "login"}, {"method", "GET"}, {"path", "/"}},
		}},
		{"nothing known", values{}, [][]Entry{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := fa.Descriptors(tt.req.of); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Descriptors() =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}

	want := `nginx, deny 429; [remote_address=client_ip] [route="login", method=method, path=path] [host=host, api_key=header:X-Api-Key] [tenant=query:tenant]`
	if got := fa.String(); got != want {
		t.Errorf("String() = %s\nwant %s", got, want)
	}
}

// values is an original request as the server knows it: the value of
// each part a forward_auth entry may read.
type values map[Source]string

func (v values) of(s Source) string { return v[s] }

// Under quota mode for every descriptor, each domain with forward_auth is
// refused where its section is written; the others are not.
func TestCheckQuotaMode(t *testing.T) {
	c := mustParse(t, `
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
forward_auth:
  proxy: nginx
  descriptors:
    - entries:
        - key: remote_address
          from: client_ip
`)
	err := c.CheckQuotaMode()
	var e *Error
	if !errors.As(err, &e) || e.File != "TestCheckQuotaMode.yaml" || e.Line != 7 || e.Field != "forward_auth" || !strings.Contains(e.Error(), `domain "web"`) {
		t.Errorf("CheckQuotaMode = %v, want domain web refused at TestCheckQuotaMode.yaml:7", err)
	}
	rls := mustParse(t, "domain: rls\ndescriptors:\n  - key: user\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if err := rls.CheckQuotaMode(); err != nil {
		t.Errorf("CheckQuotaMode without forward_auth = %v, want nil", err)
	}
}
