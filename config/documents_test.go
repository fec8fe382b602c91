package config

import (
	"errors"
	"strings"
	"testing"
)

// Options.Parse loads documents as Load loads files: the same checks and
// errors, naming the document; none is an empty config.
func TestParseDocuments(t *testing.T) {
	shop := Document{Name: "shop doc", Data: []byte("domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")}
	books := Document{Name: "books doc", Data: []byte("domain: books\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")}
	c, err := Options{}.Parse(shop, books)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "books,shop" {
		t.Errorf("domains %q, want books,shop", got)
	}
	if c, err := (Options{}).Parse(); err != nil || len(c.Domains()) != 0 {
		t.Errorf("no document: %v, %v; want an empty config", c, err)
	}
	bad := Document{Name: "bad doc", Data: []byte("domain: bad\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n")}
	_, err = Options{}.Parse(shop, bad)
	var ce *Error
	if !errors.As(err, &ce) || ce.File != "bad doc" || ce.Field != "descriptors[0].rate_limit.unit" {
		t.Errorf("a bad document: %v, want an *Error naming it and the field", err)
	}
	if _, err := (Options{}).Parse(shop, shop); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("a domain twice: %v", err)
	}
	if c, err := (Options{MergeDomains: true}).Parse(shop, Document{Name: "more", Data: []byte("domain: shop\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}); err != nil || len(c.Rules()) != 2 {
		t.Errorf("MergeDomains: %v", err)
	}
	big := Document{Name: "big", Data: make([]byte, MaxFileSize+1)}
	if _, err := (Options{}).Parse(big); err == nil || !strings.Contains(err.Error(), "big") {
		t.Errorf("a document past MaxFileSize: %v", err)
	}
	many := make([]Document, MaxDocuments+1)
	if _, err := (Options{}).Parse(many...); err == nil {
		t.Errorf("%d documents: accepted", len(many))
	}
}
