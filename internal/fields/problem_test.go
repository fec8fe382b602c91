package fields

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestProblemBodies(t *testing.T) {
	type problem struct {
		Type     string    `json:"type"`
		Title    string    `json:"title"`
		Status   int       `json:"status"`
		Detail   string    `json:"detail"`
		Violated *[]string `json:"violated-policies"`
	}
	parse := func(b []byte) problem {
		t.Helper()
		var p problem
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return p
	}
	names := []string{`per "ip"`, "daily"}
	p := parse(AppendDenied(nil, 429, []string{JSONString(names[0]), JSONString(names[1])}))
	if p.Type != QuotaExceededType || p.Title != QuotaExceededTitle || p.Status != 429 || p.Violated == nil || !reflect.DeepEqual(*p.Violated, names) {
		t.Errorf("AppendDenied(429, two rules) = %+v", p)
	}
	// Not known: left out, never an empty list.
	if p := parse(AppendDenied(nil, 403, nil)); p.Status != 403 || p.Violated != nil {
		t.Errorf("AppendDenied(403, nil) = %+v", p)
	}
	detail := "no \"X-API-Key\" header\n\xff"
	if p := parse(AppendProblem(nil, 400, detail)); p.Type != "about:blank" || p.Title != "Bad Request" || p.Status != 400 || p.Detail != "no \"X-API-Key\" header\n\uFFFD" {
		t.Errorf("AppendProblem(400) = %+v", p)
	}
}
