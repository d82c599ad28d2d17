package gatewayline

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		version string
		want    Line
		err     string
	}{
		{"0.0.111", Legacy, ""},
		{"v0.0.116", Legacy, ""},
		{"0.0.111-7-g2f7fb6559", Legacy, ""},
		{"0.0.110", "", "not one the operator speaks"},
		{"0.1.0", V01, ""},
		{"0.1.10", V01, ""},
		{"0.1.5-dev.3+g1a2b3c", V01, ""},
		{"0.2.0", "", "not one the operator speaks (0.0.111"},
		{"1.0.0", "", "not one the operator speaks"},
		{"", "", "not a major.minor.patch"},
		{"latest", "", "not a major.minor.patch"},
		{"0.1", "", "not a major.minor.patch"},
		{"0.-1.3", "", "not a major.minor.patch"},
	} {
		got, err := Of(c.version)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("Of(%q) = %q, %v; want %q", c.version, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Of(%q) = %q, %v; want an error containing %q", c.version, got, err, c.err)
		}
	}
	if l, err := Of(DefaultManaged); err != nil || l != V01 {
		t.Fatalf("the default Managed version %s is not on the 0.1 line: %v", DefaultManaged, err)
	}
}

func TestCheck(t *testing.T) {
	for version, want := range map[string]string{
		"":             "",
		"0.0.111-test": "",
		"0.1.5":        "",
		"0.1.10":       "",
		"0.2.0":        "not one the operator speaks",
		"nonsense":     "not a major.minor.patch",
	} {
		got := Check(version)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("Check(%q) = %q, want %q", version, got, want)
		}
	}
}

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		version, minimum string
		want             bool
	}{
		{"0.1.5", "0.1.5", true}, {"0.1.10", "0.1.5", true}, {"v0.1.6-dev.1+g1", "0.1.5", true}, {"0.2.0", "0.1.5", true},
		{"0.1.4", "0.1.5", false}, {"0.0.111", "0.1.5", false}, {"nonsense", "0.1.5", false}, {"", "0.1.5", false},
	} {
		if got := AtLeast(c.version, c.minimum); got != c.want {
			t.Errorf("AtLeast(%q, %q) = %v, want %v", c.version, c.minimum, got, c.want)
		}
	}
}
