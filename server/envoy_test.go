package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// loadBootstrap loads an Envoy config file of the examples as Envoy's API
// types, and returns it as JSON. No envoy binary is available to the
// tests, so the examples are checked against Envoy's API instead: each
// must parse as a v3 Bootstrap, every typed_config must name a known type
// and parse as it, and every message must pass the API's validation rules
// (protoc-gen-validate), as Envoy checks them at startup. wantAnys is the
// number of typed configs it must hold.
func loadBootstrap(t *testing.T, path string, wantAnys int) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrappb.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("%s is not a valid Envoy v3 bootstrap: %v", path, err)
	}
	var anys int
	validate(t, b.ProtoReflect(), "bootstrap", true, &anys)
	if anys != wantAnys {
		t.Errorf("%s: checked %d typed configs, want %d", path, anys, wantAnys)
	}
	return string(js)
}

// The RLS example: its settings must match the server's.
func TestEnvoyExample(t *testing.T) {
	// The connection manager, rate limit, router, and the cluster's
	// HTTP/2 options.
	js := loadBootstrap(t, "../examples/envoy/envoy.yaml", 4)
	// What ties it to sluice: the domain of the built-in policy, and
	// the health service name the server reports on; and the client's
	// address from the connection, not from its X-Forwarded-For.
	for _, want := range []string{`"domain":"sluice"`, `"service_name":"` + rlsService + `"`, `"descriptor_key":"api_key"`, `"use_remote_address":true`} {
		if !strings.Contains(js, want) {
			t.Errorf("examples/envoy/envoy.yaml lacks %s", want)
		}
	}
}

// The ext_authz example calls the domain of the sluice config beside it,
// in the URL, and sends the headers that config's forward_auth reads.
func TestEnvoyExtAuthzExample(t *testing.T) {
	// The connection manager, ext_authz and router.
	js := loadBootstrap(t, "../examples/envoy/ext_authz.yaml", 3)
	for _, want := range []string{`"path_prefix":"/v1/auth/edge"`, `"use_remote_address":true`, `{"exact":"x-forwarded-for"}`, `{"exact":"x-api-key"}`} {
		if !strings.Contains(js, want) {
			t.Errorf("examples/envoy/ext_authz.yaml lacks %s", want)
		}
	}
	e := start(t, Settings{Paths: []string{"../examples/envoy/sluice.yaml"}})
	if got := e.srv.Domains(); len(got) != 1 || got[0] != "edge" {
		t.Fatalf("examples/envoy/sluice.yaml has domains %q, want edge", got)
	}
	// Requests as the filter sends them: the original method, path and
	// query after the prefix, X-Forwarded-For with Envoy's peer appended
	// to what the client sent.
	check := func(method, target, xff string, want int) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, e.base+"/v1/auth/edge"+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", xff)
		if code, _, body := do(t, req); code != want {
			t.Errorf("%s %s (X-Forwarded-For %s): %d %q, want %d", method, target, xff, code, body, want)
		}
	}
	for i := range 5 {
		check(http.MethodPost, "/login", fmt.Sprintf("6.6.6.%d, 198.51.100.4", i), 200)
	}
	check(http.MethodPost, "//login?domain=other", "6.6.6.9, 198.51.100.4", http.StatusTooManyRequests)
	check(http.MethodPost, "/login", "198.51.100.5", 200) // another client
}

// validate runs the validation rules of m, which cover the messages in it
// (when top), and of the contents of every Any field in it.
func validate(t *testing.T, m protoreflect.Message, path string, top bool, anys *int) {
	t.Helper()
	if v, ok := m.Interface().(interface{ ValidateAll() error }); ok && top {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		*anys++
		validate(t, inner.ProtoReflect(), path+"("+string(proto.MessageName(inner))+")", true, anys)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				validate(t, v.List().Get(i).Message(), p, false, anys)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				validate(t, mv.Message(), p, false, anys)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			validate(t, v.Message(), p, false, anys)
		}
		return true
	})
}
