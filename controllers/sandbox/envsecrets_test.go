package sandbox

import (
	"slices"
	"testing"
)

func TestEnvSecretDrift(t *testing.T) {
	for _, tc := range []struct {
		name         string
		created, now map[string]string
		want         []string
	}{
		{"unchanged", map[string]string{"a": "1", "b": "7"}, map[string]string{"a": "1", "b": "7"}, nil},
		{"one rotated", map[string]string{"a": "1", "b": "7"}, map[string]string{"a": "2", "b": "7"}, []string{"a"}},
		{"all rotated, sorted", map[string]string{"b": "7", "a": "1"}, map[string]string{"b": "8", "a": "2"}, []string{"a", "b"}},
		{"created before versions were recorded", nil, map[string]string{"a": "1"}, nil},
		{"a Secret env reads now and did not then", map[string]string{"a": "1"}, map[string]string{"a": "1", "c": "3"}, []string{"c"}},
		{"a Secret env no longer reads", map[string]string{"a": "1", "gone": "4"}, map[string]string{"a": "1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := envSecretDrift(tc.created, tc.now); !slices.Equal(got, tc.want) {
				t.Fatalf("drift %v, want %v", got, tc.want)
			}
		})
	}
}
