package server

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrappb "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
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

// No envoy binary is available to the tests, so the example is checked
// against Envoy's API instead: it must parse as a v3 Bootstrap, every
// typed_config must name a known type and parse as it, and every message
// must pass the API's validation rules (protoc-gen-validate), as Envoy
// checks them at startup. Its RLS settings must match the server.
func TestEnvoyExample(t *testing.T) {
	data, err := os.ReadFile("../examples/envoy/envoy.yaml")
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
		t.Fatalf("examples/envoy/envoy.yaml is not a valid Envoy v3 bootstrap: %v", err)
	}
	var anys int
	validate(t, b.ProtoReflect(), "bootstrap", true, &anys)
	if anys != 4 {
		t.Errorf("checked %d typed configs, want 4 (connection manager, rate limit, router, and the cluster's HTTP/2 options)", anys)
	}
	// What ties it to sluice: the domain of the built-in policy, and
	// the health service name the server reports on.
	for _, want := range []string{`"domain":"sluice"`, `"service_name":"` + rlsService + `"`, `"descriptor_key":"api_key"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("examples/envoy/envoy.yaml lacks %s", want)
		}
	}
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
