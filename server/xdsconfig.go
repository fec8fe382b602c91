package server

import (
	"errors"
	"fmt"
	"strings"

	discoverypb "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicehq/sluice/config"
)

// loadXDS loads the resources of a push into a config, with the options
// the server loads files with. Each RateLimitConfig is written as the
// config file envoyproxy/ratelimit would read for it and loaded as one:
// the same checks, and the same errors, each naming the resource and the
// field (the proto's field names are the file's keys).
func (s *Server) loadXDS(resp *discoverypb.DiscoveryResponse) (*config.Config, error) {
	if t := resp.GetTypeUrl(); t != rateLimitConfigType {
		return nil, fmt.Errorf("xDS: a push of %q, want %s", t, rateLimitConfigType)
	}
	res := resp.GetResources()
	if len(res) > MaxXDSResources {
		return nil, fmt.Errorf("xDS: %d resources in one push: at most %d", len(res), MaxXDSResources)
	}
	docs := make([]config.Document, 0, len(res))
	var errs []error
	for i, a := range res {
		d, err := xdsDocument(i, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		docs = append(docs, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c, err := config.Options{MergeDomains: s.cfg.MergeDomains, EnvoyKeys: s.cfg.EnvoyKeys}.Parse(docs...)
	return c, withoutLines(err)
}

// xdsDocument is the config file a resource stands for, named for the
// resource.
func xdsDocument(i int, a *anypb.Any) (config.Document, error) {
	var rc rlsconfpb.RateLimitConfig
	if a.GetTypeUrl() != rateLimitConfigType {
		return config.Document{}, fmt.Errorf("xDS: resource %d is a %q, want %s", i, a.GetTypeUrl(), rateLimitConfigType)
	}
	if err := (proto.UnmarshalOptions{}).Unmarshal(a.GetValue(), &rc); err != nil {
		return config.Document{}, fmt.Errorf("xDS: resource %d: %w", i, err)
	}
	name := fmt.Sprintf("xDS resource %q", rc.GetName())
	if rc.GetName() == "" {
		name = fmt.Sprintf("xDS resource %d", i)
	}
	// A field this server's RateLimitConfig does not know would be
	// dropped without a word: refuse it rather than serve less than the
	// control plane asked for.
	if f := unknownField(&rc, ""); f != "" {
		return config.Document{}, &config.Error{File: name, Field: f, Err: errors.New("a field this server does not know (a newer RateLimitConfig than envoyproxy/ratelimit's?)")}
	}
	data, err := yaml.Marshal(xdsDomain{Domain: rc.GetDomain(), Descriptors: xdsDescriptors(rc.GetDescriptors())})
	if err != nil {
		return config.Document{}, fmt.Errorf("%s: %w", name, err)
	}
	return config.Document{Name: name, Data: data}, nil
}

// The config file's shape, as far as a RateLimitConfig fills it.
type (
	xdsDomain struct {
		Domain      string          `yaml:"domain"`
		Descriptors []xdsDescriptor `yaml:"descriptors,omitempty"`
	}
	xdsDescriptor struct {
		Key            string          `yaml:"key"`
		Value          string          `yaml:"value,omitempty"`
		RateLimit      *xdsRateLimit   `yaml:"rate_limit,omitempty"`
		Descriptors    []xdsDescriptor `yaml:"descriptors,omitempty"`
		ShadowMode     bool            `yaml:"shadow_mode,omitempty"`
		DetailedMetric bool            `yaml:"detailed_metric,omitempty"`
	}
	xdsRateLimit struct {
		Name            string       `yaml:"name,omitempty"`
		Replaces        []xdsReplace `yaml:"replaces,omitempty"`
		Unit            string       `yaml:"unit,omitempty"`
		RequestsPerUnit *uint32      `yaml:"requests_per_unit,omitempty"`
		Unlimited       bool         `yaml:"unlimited,omitempty"`
	}
	xdsReplace struct {
		Name string `yaml:"name"`
	}
)

func xdsDescriptors(ds []*rlsconfpb.RateLimitDescriptor) []xdsDescriptor {
	out := make([]xdsDescriptor, len(ds))
	for i, d := range ds {
		out[i] = xdsDescriptor{Key: d.GetKey(), Value: d.GetValue(), Descriptors: xdsDescriptors(d.GetDescriptors()),
			ShadowMode: d.GetShadowMode(), DetailedMetric: d.GetDetailedMetric()}
		if p := d.GetRateLimit(); p != nil {
			rl := &xdsRateLimit{Name: p.GetName(), Unlimited: p.GetUnlimited()}
			// An unlimited rule needs neither a unit nor a rate, which
			// the proto cannot leave out: its zero values are no unit
			// and no rate.
			if !p.GetUnlimited() || p.GetUnit() != rlsconfpb.RateLimitUnit_UNKNOWN {
				rl.Unit = p.GetUnit().String()
			}
			if n := p.GetRequestsPerUnit(); !p.GetUnlimited() || n != 0 {
				rl.RequestsPerUnit = &n
			}
			for _, r := range p.GetReplaces() {
				rl.Replaces = append(rl.Replaces, xdsReplace{Name: r.GetName()})
			}
			out[i].RateLimit = rl
		}
	}
	return out
}

// unknownField is the path of the first field of m, or of its
// descriptors, that this server's RateLimitConfig does not know, with
// its number; "" if there is none.
func unknownField(m proto.Message, path string) string {
	if raw := m.ProtoReflect().GetUnknown(); len(raw) > 0 {
		n, _, _ := protowire.ConsumeTag(raw)
		return strings.TrimPrefix(fmt.Sprintf("%s.(field %d)", path, n), ".")
	}
	switch m := m.(type) {
	case *rlsconfpb.RateLimitConfig:
		return descriptorsUnknown(m.GetDescriptors(), "descriptors")
	case *rlsconfpb.RateLimitDescriptor:
		if p := m.GetRateLimit(); p != nil {
			if f := unknownField(p, path+".rate_limit"); f != "" {
				return f
			}
		}
		return descriptorsUnknown(m.GetDescriptors(), path+".descriptors")
	case *rlsconfpb.RateLimitPolicy:
		for i, r := range m.GetReplaces() {
			if f := unknownField(r, fmt.Sprintf("%s.replaces[%d]", path, i)); f != "" {
				return f
			}
		}
	}
	return ""
}

func descriptorsUnknown(ds []*rlsconfpb.RateLimitDescriptor, path string) string {
	for i, d := range ds {
		if f := unknownField(d, fmt.Sprintf("%s[%d]", path, i)); f != "" {
			return f
		}
	}
	return ""
}

// withoutLines drops the line numbers from a load's errors: they are
// lines of the file written for a resource, which nobody sees; the field
// path says where the problem is.
func withoutLines(err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range j.Unwrap() {
			errs = append(errs, withoutLines(e))
		}
		return errors.Join(errs...)
	}
	if ce, ok := err.(*config.Error); ok {
		c := *ce
		c.Line = 0
		return &c
	}
	return err
}
