package apply

import (
	"encoding/json"
	"testing"
)

func TestContains(t *testing.T) {
	obj := func(s string) any {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	live := obj(`{"metadata":{"name":"a","labels":{"x":"1","y":"2"},"uid":"u"},
		"spec":{"replicas":2,"ports":[{"port":80,"protocol":"TCP"}],"paused":false}}`)
	for _, tt := range []struct {
		name string
		want string
		ok   bool
	}{
		{"every field in place; live has more", `{"metadata":{"labels":{"x":"1"}},"spec":{"replicas":2,"ports":[{"port":80}]}}`, true},
		{"a changed value", `{"spec":{"replicas":3}}`, false},
		{"a missing label", `{"metadata":{"labels":{"z":"3"}}}`, false},
		{"a list of another length", `{"spec":{"ports":[{"port":80},{"port":81}]}}`, false},
		{"a changed list element", `{"spec":{"ports":[{"port":81}]}}`, false},
		{"empty values match missing ones", `{"metadata":{"annotations":{}},"spec":{"selector":null,"tolerations":[],"note":""}}`, true},
		{"false is a value", `{"spec":{"paused":false}}`, true},
		{"a field live lacks", `{"spec":{"minReadySeconds":5}}`, false},
	} {
		if got := Contains(live, obj(tt.want)); got != tt.ok {
			t.Errorf("%s: Contains = %v, want %v", tt.name, got, tt.ok)
		}
	}
}
